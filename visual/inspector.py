"""The token inspector: why the ensemble did what it did at one token, in plain words.

:func:`explain` writes the reason from the record's typed ``details``, ``fusion`` and ``topk`` (one explainer per
:class:`~ensemble.trace.Decision`, each reading its decision's details record);
:func:`visual.splits.tokenization_html` draws every model's tokens around the same decision.
"""

from __future__ import annotations

from ensemble.trace import (
    CheckedDetails,
    Decision,
    DrafterDetails,
    EnsembledDetails,
    FusedDetails,
    RunTrace,
    TokenRecord,
)

from . import records as rd
from .blocked import explain_blocked
from .escape import safe, whitespace
from .strip import group_of
from .style import DECISION_LABELS, DECISION_STYLE, END_MARKER, model_class, swatch
from .wording import _is_end, _join, _k, _m, _p, _verb

FUSION_NAMES = {"unite": "UniTE", "gac": "GaC"}
LOW_PROB = 0.1  # below this, a model that has the chosen key "barely wanted it"


def _fusion_name(record: TokenRecord, trace: RunTrace) -> str:
    name = rd.text(record.fusion.fusion) if record.fusion is not None else None
    name = name or rd.text(rd.setting(trace, "fusion")) or (trace.method if trace.method in FUSION_NAMES else "fusion")
    return safe(FUSION_NAMES.get(name, name))


def _favourites(per_model: dict) -> str:
    out = []
    for model, top in rd.mapping(per_model).items():
        best = rd.pairs(top)
        if best:
            out.append(f"{_m(model)} {_k(best[0][0])} {_p(best[0][1])}")
    return "Each model's favourite: " + ", ".join(out) + "." if out else ""


def _sharpening(fusion) -> str:
    before, after = rd.pairs(fusion.before), rd.pairs(fusion.after)
    if fusion.sharpened and after:
        lead_before = max(before, key=lambda kv: kv[1])[0] if before else None
        lead_after = max(after, key=lambda kv: kv[1])[0]
        change = (
            f"it moved the lead from {_k(lead_before)} to {_k(lead_after)}."
            if lead_before is not None and lead_before != lead_after
            else "it did not change the leader."
        )
        if lead_before is not None and lead_before != lead_after and lead_before.startswith(lead_after):
            change += (f" Why a prefix wins: sharpening adds to a key the probability of the longer keys that start with "
                       f"it, because after {_k(lead_after)} every model can still go on to {_k(lead_before)} (and to "
                       f"the other continuations), so the shorter key gathers the support of them all.")
        return f"Sharpening ({safe(fusion.sharpen)}) ran because the fused maximum was below 0.5; {change}"
    if fusion.sharpen and fusion.sharpen != "none":
        return f"Sharpening ({safe(fusion.sharpen)}) was on but did not run: the fused maximum was already 0.5 or more."
    return "No sharpening."


def _weights(fusion) -> str:
    weights = {m: rd.number(w) for m, w in rd.mapping(fusion.weights).items()}
    values = [w for w in weights.values() if w is not None]
    if not values or max(values) - min(values) < 1e-3:
        return ""
    return "Model weights: " + ", ".join(f"{_m(m)} {_p(w)}" for m, w in weights.items()) + "."


def _mean(details: CheckedDetails, trace: RunTrace) -> str:
    """"mean probability 0.62", or with SAFE's weights where they differ, "weighted mean probability 0.62 (qwen
    counts 2 and gemma3 counts 1)" (``Settings.safe_weights``: the drafter at ``drafter_weight``, unless ``weights`` names
    it)."""
    mean = f"mean probability {_p(details.mean_prob)}"
    weights = trace.safe_weights()
    counts = {n: weights.get(n, 1.0) for n in rd.mapping(details.probs)}
    if len(set(counts.values())) <= 1:
        return mean
    return f"weighted {mean} ({_join([f'{_m(n)} counts {w:g}' for n, w in counts.items()])})"


def _probs(details: CheckedDetails) -> str:
    probs = rd.mapping(details.probs)
    own = rd.mapping(details.verifier_tokens)
    parts = []
    for model, p in probs.items():
        token = rd.text(own.get(model))
        parts.append(f"{_m(model)} {_p(p)}" + (f" for {_k(token)}" if token is not None else " for the draft"))
    return ", ".join(parts)


def _preferences(details: CheckedDetails) -> list[str]:
    """Verifiers whose top choice (``per_model_top``) is not their own next token, with what they preferred."""
    tops = rd.mapping(details.per_model_top)
    out = []
    for model, own in rd.mapping(details.verifier_tokens).items():
        top = rd.pairs(tops.get(model))
        if top and isinstance(own, str) and top[0][0] != own:
            out.append(f"{_m(model)} preferred {_k(top[0][0])} {_p(top[0][1])}")
    return out


def _runners_up(top: list[tuple[str, float]], chosen: str, limit: int = 4) -> str:
    others = [f"{_k(k)} {_p(p)}" for k, p in top if k != chosen and k not in rd.END_TEXTS][:limit]
    return ", ".join(others)


def _completion(record: TokenRecord) -> str:
    """How a fused key that ended inside a character was finished."""
    d = record.details
    if not isinstance(d, EnsembledDetails | FusedDetails):
        return ""
    by = rd.text(d.completed_by)
    if by is not None:
        key = f" {_k(record.fusion.choice)}" if record.fusion is not None and isinstance(record.fusion.choice, str) else ""
        return f"The fused key{key} ends inside a character, so {_m(by)} finished that character with its own byte tokens."
    completed = rd.text(d.completed)  # traces written before ``completed_by``
    if completed is not None:
        return f"The fused key {_k(completed)} ended inside a character, so it was completed to {_k(record.text)}."
    return ""


# -- one explainer per decision -------------------------------------------------------------------------------
def _explain_drafter(record: TokenRecord, trace: RunTrace) -> list[str]:
    top = rd.pairs(record.topk)
    if _is_end(record, trace):
        p = next((p for k, p in top if k in rd.END_TEXTS), None)
        others = _runners_up(top, record.text)
        numbers = (f"Its probability of ending: {_p(p)}." if p is not None else "") + (
            f" Had it gone on, its next choices were: {others}." if others else "")
        return [f"{_m(record.model)} chose to end the answer here.", numbers.strip()]
    if isinstance(record.details, DrafterDetails) and record.details.forced:
        return [f"You chose {_k(record.text)} here (What if it had chosen this?): it was put in as text, every model "
                "re-read the answer with it, and the method went on from there."]
    if record.condition == "completes_character":
        return [
            f"A byte token of {_m(record.model)} that finishes the character the token before it started: the chosen key "
            "ended inside a character and the response only ever holds whole characters."
        ]
    control = isinstance(record.details, DrafterDetails) and record.details.control_token
    if control or record.start == record.end:
        return [f"A control token of {_m(record.model)}: it appends no text to the response and is shown as a small marker."]
    if not top:
        return [f"{_m(record.model)}'s own token {_k(record.text)}, accepted without any check (no other model takes part here)."]
    chosen = next((p for k, p in top if k == record.text), None)
    others = _runners_up(top, record.text)
    numbers = (f"Its probability for it: {_p(chosen)}." if chosen is not None else "") + (
        f" Runners-up: {others}." if others else "")
    return [f"{_m(record.model)} wrote {_k(record.text)} on its own; no other model checked it.", numbers.strip()]


def _explain_consensus(record: TokenRecord, trace: RunTrace) -> list[str]:
    d = record.details
    own = rd.mapping(d.verifier_tokens)
    probs = rd.mapping(d.probs)
    mean = _mean(d, trace)
    preferred = _preferences(d)
    if _is_end(record, trace):
        drafter = rd.drafter_of(record, trace)
        p = rd.number(probs.get(drafter))
        proposal = f"The drafter {_m(drafter)} proposed to stop here" + (f" (probability {_p(p)})" if p is not None else "")
        lead = f"The drafter {_m(drafter)} proposed to stop here and the other models were sure enough, so the answer ended without a vote."
        if record.condition == "unanimous":
            agreeing = _join([f"{_m(v)} {_p(probs.get(v))}" for v in own if rd.number(probs.get(v)) is not None])
            lead = f"The drafter {_m(drafter)} proposed to stop here and every model agreed, so the answer ended without a vote."
            first = (
                f"{proposal}; all verifiers agreed{f' ({agreeing})' if agreeing else ''}: each one's top choice is to end "
                "as well, so the answer ended without ensembling (unanimous)."
            )
        else:
            first = (
                f"{proposal}; not every verifier agreed{f' ({_join(preferred)})' if preferred else ''}, but the models are "
                f"confident on average: {mean} &gt; 0.5, so SAFE accepted the end of the answer without "
                "ensembling (confident)."
            )
    elif record.condition == "unanimous":
        lead = f"All models agree with the draft {_k(record.text)}, so it was accepted without a vote."
        tokens = _join([f"{_m(v)} {_k(t)}" for v, t in own.items() if isinstance(t, str)])
        first = (
            f"Every verifier's top choice here is its own next token for the drafted text{f' ({tokens})' if tokens else ''}, so all models "
            f"agree with the draft {_k(record.text)} and it was accepted without ensembling (unanimous)."
        )
    else:
        lead = (f"Not every model's favourite was the draft {_k(record.text)}, but on average the models are sure enough of "
                "it, so it was accepted without a vote.")
        first = (
            f"Not every verifier's top choice matched{f' ({_join(preferred)})' if preferred else ''}, but the models are "
            f"confident on average: {mean} &gt; 0.5, so the draft {_k(record.text)} was accepted without "
            "ensembling (confident)."
        )
    listed = _probs(d)
    return [lead, first, f"Probabilities: {listed}." if listed else ""]


def _discarded(record: TokenRecord, trace: RunTrace) -> str:
    """The whole draft of a replaced token's round and the part of it thrown away."""
    rnd = trace.rounds[record.round] if isinstance(record.round, int) and 0 <= record.round < len(trace.rounds) else None
    cands = [c for c in (rnd.candidates if rnd is not None else []) if isinstance(c, dict)]
    text = rd.text(cands[0].get("text")) if cands else None
    if rnd is None or not text:
        return ""
    cut = max(0, min(len(text), record.start - int(rnd.start)))
    return f" The drafter's whole draft for this round was {_k(text)}; from this token on, {_k(text[cut:])} was discarded."


def _fork_hint(record: TokenRecord) -> str:
    """Where to see what the drafter alone would have written from a replaced token: the app's words first, the
    command line's after them (a detail for who uses it)."""
    return ("To see what the drafter alone would have written from here, use What if? under the inspector: continue "
            f"from this token with the drafter alone (on the command line: <code>fork --at {int(record.index)}</code>).")


def _explain_ensembled(record: TokenRecord, trace: RunTrace) -> list[str]:
    d, fusion = record.details, record.fusion
    method = _fusion_name(record, trace)
    end = _is_end(record, trace)
    why = (f"Why a vote: the {_mean(d, trace)} ≤ 0.5 and not every verifier's top choice matched the draft, so SAFE "
           f"fused their distributions with {method}.")
    draft_key = _k(fusion.draft) if fusion is not None and isinstance(fusion.draft, str) else "the draft"
    choice_key = _k(fusion.choice) if fusion is not None and isinstance(fusion.choice, str) else _k(record.text)
    drafter = _m(rd.drafter_of(record, trace))
    if end and record.decision == Decision.ENSEMBLED_KEPT:
        first = f"The drafter {drafter} proposed to stop here; the models disagreed, so they voted, and the vote was to stop too."
    elif end:
        first = f"The models disagreed, so they voted: the vote was to stop here instead of the drafter's {draft_key}."
    elif record.decision == Decision.ENSEMBLED_KEPT:
        first = f"The models disagreed, so they voted: their weighted average picked the drafter's {draft_key} too, so it stayed."
    else:
        first = f"The models disagreed, so they voted: their weighted average picked {choice_key}, which replaced the drafter's {draft_key}."
    if fusion is None:
        return [first, why]
    fused_p = d.fused_prob
    choice = f"{_k(fusion.choice)}" + (f" (fused probability {_p(fused_p)})" if rd.number(fused_p) is not None else "")
    draft = _k(fusion.draft) if isinstance(fusion.draft, str) else "the draft"
    if record.decision == Decision.ENSEMBLED_KEPT:
        if end:
            verdict = f"The fused choice {choice} is to stop as well, so the draft's end was kept and the answer ended here."
        else:
            verdict = f"The fused choice {choice} equals the draft, so the draft was kept and the round went on."
    elif end:
        verdict = (
            f"The fused choice {choice} was to stop instead of the draft {draft}, so the answer ended here and the rest of "
            "the draft was discarded."
        )
    else:
        verdict = (
            f"The fused choice {choice} differs from the draft {draft}, so it replaced the draft token; the rest of the "
            "draft was discarded and a new round started."
        ) + _discarded(record, trace)
        if fusion.draft in rd.END_TEXTS:
            verdict += " (The drafter wanted to stop here; the ensemble went on.)"
    completion = _completion(record)
    fork = _fork_hint(record) if record.decision == Decision.ENSEMBLED_REPLACED and not end else ""
    return [first, f"{why} {verdict}" + (f" {completion}" if completion else ""), _favourites(fusion.per_model),
            _sharpening(fusion), _weights(fusion), fork]


def _vocabulary(record: TokenRecord, trace: RunTrace, key: str, support: dict[str, float | None]) -> str:
    """Which models lack the chosen key as a token (they re-tokenize) and which have it but barely wanted it."""
    d = record.details
    if not isinstance(d.in_vocab, list):
        return ""  # not recorded (older traces): claim nothing
    have = rd.names(d.in_vocab)
    models = list(support) or list(trace.models)
    end = _is_end(record, trace)
    choice = _k(key)
    sentences = []
    lacking = [m for m in models if m not in have]
    if lacking:
        splits = rd.splits(d.splits, len(trace.text) + rd.MAX_WINDOW)
        cuts = []
        for m in lacking:
            pieces = [t[0] for t in splits.get(m, []) if t[1] < record.end and t[2] > record.start]
            if pieces:
                cuts.append(f"{_m(m)} now has <code class=\"el-key\">{'|'.join(whitespace(p, True, breaks=False) for p in pieces)}</code>")
        sentences.append(
            f"{_join([_m(m) for m in lacking])} {_verb(lacking, 'has', 'have')} no token {choice}, so "
            f"{_verb(lacking, 'it has', 'they have')} to re-tokenize the text{f' ({_join(cuts)})' if cuts else ''}: the kind of "
            "OOV-like prefix SAFE avoids."
        )
    elif not end:
        sentences.append(f"Every model has {choice} as a token, so all of them simply append it.")
    tops = {m: rd.pairs(v) for m, v in rd.mapping(record.fusion.per_model).items()} if record.fusion is not None else {}
    low = []
    for m in models:
        p = support.get(m)
        if m in have and p is not None and p < LOW_PROB:
            top = tops.get(m)
            favourite = f" (its favourite: {_k(top[0][0])} {_p(top[0][1])})" if top and top[0][0] != key else ""
            if end:
                what = "gave ending only"
            elif lacking:
                what = f"has {choice} as a token but gave it only"
            else:
                what = "gave it only"
            low.append(f"{_m(m)} {what} {_p(p)}{favourite}")
    if low:
        sentences.append(_join(low) + f", so {_verb(low, 'it follows', 'they follow')} a choice {_verb(low, 'it', 'they')} barely wanted.")
    return " ".join(sentences)


def _explain_fused(record: TokenRecord, trace: RunTrace) -> list[str]:
    d, fusion = record.details, record.fusion
    support = {m: rd.number(p) for m, p in rd.mapping(d.support).items()}
    method = _fusion_name(record, trace)
    key = fusion.choice if fusion is not None and isinstance(fusion.choice, str) else record.text
    if _is_end(record, trace):
        fused_p = dict(rd.pairs(fusion.before)).get(key) if fusion is not None else None
        first = f"All models voted at this step, as {method} has them do at every step, and the vote was to stop, so the answer ended here."
        how = (f"Every-token fusion ({method}) fused all models' distributions; its top choice was to stop "
               f"({_k(key)}{f', fused probability {_p(fused_p)}' if fused_p is not None else ''}).")
    else:
        first = f"All models voted on this token, as {method} has them do at every step, and picked {_k(key)}; each model then continues from it."
        how = ""
    parts = [first, " ".join(s for s in (how, _vocabulary(record, trace, key, support)) if s)]
    if support:
        parts.append("Probability each model gave it: " + ", ".join(f"{_m(m)} {_p(p)}" for m, p in support.items()) + ".")
    if fusion is not None:
        parts += [_favourites(fusion.per_model), _sharpening(fusion)]
    parts.append(_completion(record))
    return parts


def _explain_gated(record: TokenRecord, trace: RunTrace) -> list[str]:
    d = record.details
    primary = rd.text(d.primary) or record.model
    gate = d.gate if rd.number(d.gate) is not None else rd.setting(trace, "gac_gate")
    if _is_end(record, trace):
        lead = f"{_m(primary)} was sure enough on its own that the answer ends here, so it ended without a vote (GaC's gate)."
        first = (
            f"GaC's gate: the primary model {_m(primary)} puts {_p(d.primary_top)} on its top choice, to stop here, "
            f"above the gate {_p(gate)}, so the answer ended without fusing."
        )
    else:
        lead = f"{_m(primary)} was sure enough of {_k(record.text)} on its own, so it was used without a vote (GaC's gate)."
        first = (
            f"GaC's gate: the primary model {_m(primary)} puts {_p(d.primary_top)} on its top token, above the gate "
            f"{_p(gate)}, so its token {_k(record.text)} was used without fusing."
        )
    others = _runners_up(rd.pairs(record.topk), record.text)
    return [lead, first + (f" {_m(primary)}'s runners-up: {others}." if others else "")]


def _explain_segment(record: TokenRecord, trace: RunTrace) -> list[str]:
    rnd = next((r for r in trace.rounds if r.index == record.round), None)
    ending = (
        [f"{_m(record.model)}'s winning segment ended with the end-of-sequence token, so the answer ends here."]
        if _is_end(record, trace)
        else []
    )
    if rnd is None:
        return ending or [f"Part of the winning segment of {_m(record.model)}."]
    how = f"Round {int(rnd.index)}: every drafting model proposed a segment and the verifiers scored all of them."
    cands = [c for c in rnd.candidates if isinstance(c, dict)]
    if len(cands) <= 1 or not rnd.aggregate:
        return [*ending, f"This token is part of {_m(record.model)}'s segment, the only proposal of its round, so it won without a vote.", how]
    scores = [f"{_m(c.get('model'))} {_p(s)}" for c, s in zip(cands, rnd.aggregate) if c.get("model") != rnd.winner]
    win = next((s for c, s in zip(cands, rnd.aggregate) if c.get("model") == rnd.winner), None)
    winner_text = rd.text(rnd.accepted_text) or ""
    return [
        *ending,
        f"This token is part of {_m(rnd.winner)}'s segment: every model proposed how to go on and the models' vote picked {_m(rnd.winner)}'s.",
        f"{how} {_m(rnd.winner)}'s segment {_k(winner_text)} won with weighted score {_p(win)} (against {', '.join(scores)}).",
    ]


_EXPLAINERS = {  # each reads the details record of its decision (the record's type follows its decision)
    Decision.DRAFTER: _explain_drafter,
    Decision.CONSENSUS: _explain_consensus,
    Decision.OOV_BLOCKED: explain_blocked,
    Decision.ENSEMBLED_KEPT: _explain_ensembled,
    Decision.ENSEMBLED_REPLACED: _explain_ensembled,
    Decision.FUSED: _explain_fused,
    Decision.GATED: _explain_gated,
    Decision.SEGMENT: _explain_segment,
}


def explain(trace: RunTrace, index) -> str:
    """A short plain-language HTML explanation of the decision at token ``index`` (the strip's ``data-i``)."""
    record = rd.find_record(trace, index)
    if record is None:
        return '<div class="el-explain"><p class="el-muted">Click a token in the response to see why it was chosen.</p></div>'
    position = next(i for i, t in enumerate(trace.tokens) if t is record)
    group = group_of(trace.tokens, position)
    decision = record.decision if record.decision in DECISION_STYLE else ""
    cls = decision
    if record.decision == Decision.SEGMENT:
        cls = model_class(trace.models, record.model) or decision
    piece = trace.text[record.start : record.end]
    if _is_end(record, trace):
        shown = f'<code class="el-key">{safe(END_MARKER)}</code> (end of the answer)'
    else:
        shown = _k(piece) if piece else _k(record.text)
    head = (
        f'<p>{swatch(cls)} <b>{safe(DECISION_LABELS.get(record.decision, record.decision))}</b>'
        + (f" ({safe(record.condition)})" if record.condition else "")
        + f" · token #{int(record.index)} {shown} · {_m(record.model)}"
        + (f" · round {int(record.round)}" if isinstance(record.round, int) else "")
        + "</p>"
    )
    try:
        sentences = _EXPLAINERS.get(record.decision, _explain_drafter)(record, trace)
    except (AttributeError, KeyError, TypeError, ValueError):  # a malformed uploaded record: say so, never crash
        sentences = ["This record's details are not in the expected form, so no explanation can be given; see the raw JSON."]
    sentences = [s for s in sentences if s]
    outside = getattr(record.details, "outside_top_k", None)
    if isinstance(outside, dict) and outside:
        sentences.append(
            _join([f"{_m(m)}'s probabilities here include tokens outside {_m(m)}'s top {int(k) if str(k).isdigit() else 'k'}"
                   for m, k in outside.items()])
            + " (its server sends only its top k; outside it, a probability is the mass the top k leave, spread evenly)."
        )
    body = "".join(f"<p>{s}</p>" for s in sentences[:2])
    more = " ".join(sentences[2:])
    if len(group) > 1:
        names = " ".join(safe(r.text) for r in group)
        more += f" This character was generated as {len(group)} byte tokens ({names}), drawn together so it is never split."
    more_html = f'<p class="el-muted">{more.strip()}</p>' if more.strip() else ""
    return f'<div class="el-explain">{head}{body}{more_html}</div>'


def inspector_json(trace: RunTrace, index) -> dict:
    """The raw record at ``index`` as a JSON-ready dict (empty when there is none)."""
    record = rd.find_record(trace, index)
    return rd.record_dict(record) if record is not None else {}

