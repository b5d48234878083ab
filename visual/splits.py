"""Every model's tokens around one decision, on one character axis (the inspector's tokenization view).

SAFE records and every-token steps carry ``details.splits``: each model's own tokens near the decision. They
are drawn under the response's tokens, over the stretch all of them cover, cut where every model has an edge.
Traces without splits (older uploads, SpecEM, single) show the response's tokens and, for SAFE, each
verifier's own next token; what a trace does not record is left blank (dotted), never guessed.
"""

from __future__ import annotations

from ensemble.trace import CheckedDetails, Decision, FusedDetails, GatedDetails, OovBlockedDetails, RunTrace, TokenRecord

from . import records as rd
from .aligned import Box, Row, grid_html, key_html
from .escape import safe, whitespace
from .strip import token_groups
from .style import DECISION_LABELS, DECISION_STYLE, END_MARKER

CONTEXT_GROUPS = 6  # tokens shown on each side of the clicked one in the response row (no splits recorded)
SAFE_DECISIONS = (Decision.CONSENSUS, Decision.OOV_BLOCKED, Decision.ENSEMBLED_KEPT, Decision.ENSEMBLED_REPLACED)


def _code(text: str) -> str:
    return f'<code class="el-key">{whitespace(text, True, breaks=False)}</code>'


def _group_box(group: list[TokenRecord], record: TokenRecord) -> Box:
    """One response token (or byte group) as a box coloured by its decision, the clicked one outlined."""
    first = group[0]
    classes = (
        first.decision if first.decision in DECISION_STYLE else "",
        "bytes" if len(group) > 1 else "",
        "el-current" if any(r is record for r in group) else "",
    )
    title = f"#{first.index} {DECISION_LABELS.get(first.decision, first.decision)} · {first.model}"
    if len(group) > 1:
        title += " · byte tokens " + " ".join(r.text for r in group)
    return Box(first.start, first.end, title, " ".join(c for c in classes if c))


def _response_row(trace: RunTrace, record: TokenRecord) -> tuple[Row, int, int]:
    groups = [g for g in token_groups(trace.tokens) if g[0].start < g[0].end]
    at = next((i for i, g in enumerate(groups) if any(r is record for r in g)), None)
    if at is None:  # a zero-width record: the groups around its offset
        at = next((i for i, g in enumerate(groups) if g[0].start >= record.start), len(groups) - 1)
    chosen = groups[max(0, at - CONTEXT_GROUPS) : at + CONTEXT_GROUPS + 1] if groups else []
    boxes = [_group_box(g, record) for g in chosen]
    lo = boxes[0].start if boxes else record.start
    hi = boxes[-1].end if boxes else record.end
    return Row("response", boxes, "the accepted tokens, coloured by decision"), lo, hi


def _decision_point(record: TokenRecord, trace: RunTrace) -> int:
    """Where the decision was taken: SAFE's boundary, the fusion's boundary, else the record's start."""
    limit = len(trace.text) + rd.MAX_WINDOW
    candidates = (record.details.boundary, record.fusion.boundary if record.fusion is not None else None)
    for value in candidates:
        point = rd.integer(value)
        if point is not None and 0 <= point <= limit:
            return point
    return record.start


def _window(splits: dict[str, list[tuple[str, int, int]]], mark: int) -> tuple[int, int]:
    """The stretch every model's recorded tokens cover, cut where all of them have an edge (no token straddles it)."""
    rows = list(splits.values())
    shared = set.intersection(*({t[1] for t in r} | {t[2] for t in r} for r in rows))
    first = max(min(t[1] for t in r) for r in rows)
    last = min(max(t[2] for t in r) for r in rows)
    left = [e for e in shared if first <= e <= mark]
    right = [e for e in shared if mark <= e <= last]
    lo = min(left) if left else min(t[1] for r in rows for t in r)
    hi = max(right) if right else max(t[2] for r in rows for t in r)
    return max(lo, mark - rd.MAX_WINDOW // 2), min(hi, mark + rd.MAX_WINDOW // 2)


def _role(record: TokenRecord, trace: RunTrace, model: str, drafter: str | None) -> str:
    d = record.details
    if drafter is not None:
        if model == drafter:
            return "drafter"
        return "blocked" if isinstance(d, OovBlockedDetails) and model in rd.names(d.blocked_by) else "verifier"
    if isinstance(d, GatedDetails) and model == rd.text(d.primary):
        return "primary"
    if isinstance(d, FusedDetails) and isinstance(d.in_vocab, list) and model not in rd.names(d.in_vocab):
        return "re-tokenized"
    return ""


def _splits_view(trace: RunTrace, record: TokenRecord, splits: dict[str, list[tuple[str, int, int]]], mark: int, lo: int, hi: int) -> str:
    """Every model's recorded tokens over ``[lo, hi)``, under the accepted response tokens."""
    text = list(trace.text) + [" "] * max(0, hi - len(trace.text))
    for tokens in splits.values():  # the text the models saw (it may hold draft that was later discarded)
        for piece, start, end in tokens:
            if lo <= start and end <= hi:
                text[start:end] = list(piece[: end - start])
    axis = "".join(text)
    draft_shown = axis[lo:hi] != trace.text[lo:hi]
    replaced = record.decision == Decision.ENSEMBLED_REPLACED and draft_shown
    response = [
        _group_box(g, record)
        for g in token_groups(trace.tokens)
        if lo <= g[0].start < g[0].end <= hi and trace.text[g[0].start : g[0].end] == axis[g[0].start : g[0].end]
        and not (replaced and g[0].start >= mark)  # past the replacement the response is other text than the axis
    ]
    struck = None
    if replaced:
        box = _replacement_box(trace, record, splits, mark, hi)
        response.append(box)
        struck = (mark, hi)
    gap = ("discarded draft: it was replaced, and the response went on from the fused choice" if replaced
           else "not in the response here (draft that was not kept)")
    rows = [Row("response", response, "the accepted tokens, coloured by decision", gap)]
    is_safe = record.decision in SAFE_DECISIONS
    drafter = rd.drafter_of(record, trace) if is_safe else None
    for model in sorted(splits, key=lambda m: m != drafter):
        boxes = []
        for piece, start, end in splits[model]:
            if start == end:
                continue
            incomplete = rd.is_incomplete(piece) and len(piece) == end - start + 1
            title = f"{model}: {piece!r} [{start}, {end})" + (" · ends inside a character" if incomplete else "")
            boxes.append(Box(start, end, title, "incomplete" if incomplete else ""))  # models: neutral tints, named rows
        role = _role(record, trace, model, drafter)
        rows.append(Row(f"{model} ({role})" if role else model, boxes, f"{model}'s own tokens here"))
    if is_safe:
        note = "Each model's own tokens around this boundary when SAFE checked it; the response row shows the accepted tokens, coloured by decision."
        if replaced:
            checked = axis[mark:hi]
            instead = ("the fused choice was to stop instead (the response row shows the end there)" if record.start == record.end
                       else f"the fused choice {_code(record.text)} replaced it (the response row shows it in the draft's place)")
            note += (f" After the decision point the models checked the draft {_code(checked)} (the text row shows it, struck "
                     f"through: it was discarded); {instead}.")
        elif draft_shown:
            note += " Part of the text the models checked was draft that did not end up in the response; the text row shows that draft."
    else:
        note = (
            "Each model's tokens right after this step: a model that has the chosen key as a token appends it, the others "
            "re-tokenize the text."
        )
    if rd.is_end(record, len(trace.text)):
        note += f" The answer ends at the decision point ({safe(END_MARKER)})."
    body = grid_html(axis, lo, hi, rows, mark=mark if lo <= mark <= hi else None, block_chars=None, struck=struck)
    return f'<div class="el-tokenization"><p class="el-muted">{note}</p>{body}{key_html(with_decision=True)}</div>'


def _replacement_box(trace: RunTrace, record: TokenRecord, splits: dict[str, list[tuple[str, int, int]]], mark: int,
                     hi: int) -> Box:
    """The replacing token in the response row, drawn in the place of the draft token it replaced: over the draft
    key's columns from the decision point (the axis there holds the draft the models checked, struck through)."""
    draft = record.fusion.draft if record.fusion is not None and isinstance(record.fusion.draft, str) else ""
    edges = sorted({e for tokens in splits.values() for t in tokens for e in t[1:] if mark < e <= hi} | {hi})
    want = mark + max(1, len(draft))
    end = next((e for e in edges if e >= want), hi)
    shown = safe(END_MARKER) if record.start == record.end else whitespace(record.text, True, breaks=False)
    title = (f"#{record.index} {DECISION_LABELS[Decision.ENSEMBLED_REPLACED]} · {record.model}: "
             f"{record.text!r} replaced the draft {draft!r}")
    return Box(mark, end, title, f"{Decision.ENSEMBLED_REPLACED} el-current el-replacement", shown)


def tokenization_html(trace: RunTrace, index) -> str:
    """Each model's tokenization around token ``index`` on one character axis, the decision point marked.

    Records with ``details.splits`` (SAFE decisions, every-token steps) show every model's own tokens there,
    under the response's tokens. Without splits (older traces, SpecEM, single) the response's tokens are shown
    with each SAFE verifier's own next token at the boundary; what the trace does not record is left blank
    (dotted), not guessed.
    """
    record = rd.find_record(trace, index)
    if record is None:
        return ""
    mark = _decision_point(record, trace)
    splits = rd.splits(record.details.splits, len(trace.text) + rd.MAX_WINDOW)
    if splits:
        lo, hi = _window(splits, mark)
        if lo < hi:
            return _splits_view(trace, record, splits, mark, lo, hi)
    mark = mark if mark <= len(trace.text) else record.start
    response, lo, hi = _response_row(trace, record)
    rows = [response]
    own = record.details.verifier_tokens if isinstance(record.details, CheckedDetails) else None
    for model, key in rd.mapping(own).items():
        if isinstance(key, str) and key and trace.text[mark : mark + len(key)] == key:
            end = mark + len(key)
            hi = max(hi, min(end, lo + rd.MAX_WINDOW))
            if end <= hi:
                box = Box(mark, end, f"{model}'s own next token {key!r}", "")
                rows.append(Row(f"{model} (next)", [box], "the verifier's own next token here"))
    note = "The response's tokens around this point" + (
        ", and each verifier's own next token at the boundary (the rest of its tokens is not recorded)."
        if len(rows) > 1
        else " (this trace does not record each model's own tokens here)."
    )
    if rd.is_end(record, len(trace.text)):
        note += f" The answer ends at the decision point ({END_MARKER})."
    body = grid_html(trace.text, lo, hi, rows, mark=mark if lo <= mark <= hi else None, block_chars=None)
    return f'<div class="el-tokenization"><p class="el-muted">{safe(note)}</p>{body}{key_html(with_decision=True)}</div>'
