"""Why SAFE's stability check blocked fusion at a token: how each verifier cuts the text there, and what it wanted."""

from __future__ import annotations

from ensemble.trace import RunTrace, TokenRecord

from . import records as rd
from .escape import whitespace
from .wording import _is_end, _join, _k, _m, _p, _verb


def _region(a: list[tuple[str, int, int]], b: list[tuple[str, int, int]], boundary: int) -> tuple[int, int] | None:
    """The smallest stretch around ``boundary`` where both tokenizations have an edge at each end."""
    edges_a = {t[1] for t in a} | {t[2] for t in a}
    edges_b = {t[1] for t in b} | {t[2] for t in b}
    start = end = boundary
    for _ in range(64):
        grow = False
        for tokens, edges in ((a, edges_a), (b, edges_b)):
            for _text, s, e in tokens:
                if s < start < e or (start not in edges and s < start <= e):
                    start, grow = s, True
                if s < end < e or (end not in edges and s <= end < e):
                    end, grow = e, True
        if not grow:
            break
    if start < boundary < end and start in edges_a and start in edges_b and end in edges_a and end in edges_b:
        return start, end
    return None


def _cut(tokens: list[tuple[str, int, int]], start: int, end: int) -> str:
    return "|".join(whitespace(t[0], True, breaks=False) for t in tokens if start <= t[1] and t[2] <= end)


def explain_blocked(record: TokenRecord, trace: RunTrace) -> list[str]:
    d = record.details
    blocked = rd.names(d.blocked_by)
    splits = rd.splits(d.splits, len(trace.text) + rd.MAX_WINDOW)
    drafter = rd.drafter_of(record, trace)
    boundary = rd.integer(d.boundary)
    end = _is_end(record, trace)
    blockers, cut = _join([_m(v) for v in blocked]) or "a verifier", _verb(blocked or [None], "cuts", "cut")
    if end:
        lead = (f"The drafter {_m(drafter)} proposed to stop here; {blockers} {cut} the text differently, "
                "so the models could not vote and the answer ended as proposed.")
    elif record.condition == "inside_character" or boundary is None:
        lead = (f"This token starts in the middle of a character, so the models could not vote here and {_m(drafter)}'s "
                f"token {_k(record.text)} was kept as it wrote it.")
    else:
        lead = (f"{blockers} {cut} the text differently here, so the models could not vote and "
                f"{_m(drafter)}'s token {_k(record.text)} was kept as it wrote it.")
    sentences = [lead]
    if record.condition == "inside_character" or boundary is None:
        sentences.append(
            f"The draft token {_k(record.text)} starts inside a multi-byte character: its first bytes came from an "
            f"earlier token, so no model can start a token here and {_join([_m(v) for v in blocked]) or 'the verifiers'} "
            "would be handed a broken character."
        )
    else:
        # Verifiers that cut the same stretch the same way share one sentence.
        found: dict[tuple, list[str]] = {}
        for v in blocked:
            region = _region(splits.get(v, []), splits.get(drafter, []), boundary)
            if region is None:
                found.setdefault(("none",), []).append(v)
                continue
            tokens = [t for t in splits[v] if region[0] <= t[1] and t[2] <= region[1]]
            whole = "".join(t[0] for t in tokens)
            found.setdefault((region, whole, len(tokens), _cut(splits[v], *region)), []).append(v)
        for key, verifiers in found.items():
            who = _join([_m(v) for v in verifiers])
            it, they = _verb(verifiers, "it", "them"), _verb(verifiers, "it", "they")
            if key == ("none",):
                sentences.append(
                    f"{who} {_verb(verifiers, 'has', 'have')} no token edge at character {int(boundary)}, so fusing here "
                    f"would hand {it} a prefix {they} never produced."
                )
                continue
            (start, stop), whole, count, verifier_cut = key
            mine = f'<code class="el-key">{_cut(splits[drafter], start, stop)}</code>'
            if count == 1:
                how = f"{_verb(verifiers, 'keeps', 'keep')} {_k(whole)} as one token"
            else:
                how = f"{_verb(verifiers, 'cuts', 'cut')} {_k(whole)} as <code class=\"el-key\">{verifier_cut}</code>"
            sentences.append(
                f"{who} {how} while {_m(drafter)} has {mine}, so fusing here would hand {who} a prefix {they} never produced."
            )
    sentences += _blocked_wants(d, blocked)
    aligned = [m for m in splits if m != drafter and m not in blocked]
    if aligned and boundary is not None:
        sentences.append(
            f"{_join([_m(m) for m in aligned])} {_verb(aligned, 'has', 'have')} a token edge here too; one verifier without "
            "one is enough to block fusing."
        )
    return sentences


def _blocked_wants(d, blocked: list[str]) -> list[str]:
    """What a blocked verifier wanted, read where its own token starts (recorded since SAFE keeps those rows)."""
    tops, starts, tokens = rd.mapping(d.get("per_model_top")), rd.mapping(d.get("verifier_from")), rd.mapping(d.get("verifier_tokens"))
    out = []
    for v in blocked:
        top = rd.pairs(tops.get(v))
        at = rd.integer(starts.get(v))
        if not top or at is None:
            continue
        key, p = top[0]
        own = tokens.get(v)
        mine = f", and it has {_k(own)} there" if isinstance(own, str) and own != key else ""
        out.append(f"Where its own token starts (character {at}), {_m(v)}'s top choice is {_k(key)} (p {_p(p)}){mine}.")
    return out
