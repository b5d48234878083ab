"""Where two answers to one question part, and the decision each run took there.

The two answers share their text up to the first differing character; the token of each run that covers that
character (or starts there) is where the runs chose differently (:func:`parting_tokens`: or the token that ended
right there, when only the other run's token runs on across that point), and its decision record says why: a replaced
draft token, a fusion, a verifier's veto, a SpecEM segment won by another model. :func:`decision_line` says that
record in one sentence (for the terminal and agents); the app and ``report`` draw the full explanation with the
inspector's own functions.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import EvaluationError
from ..fork import compare_texts
from ..trace import RunTrace, TokenRecord
from ..trace.decisions import CheckedDetails, Decision, FusedDetails, GatedDetails, OovBlockedDetails


def token_at(trace: RunTrace, char: int) -> int | None:
    """The index of the token that covers character ``char`` of the answer, else the first that starts after it
    (None: the answer ends before it)."""
    for t in trace.tokens:
        if t.start <= char < t.end or (t.start >= char and t.end > t.start):
            return t.index
    return None


def parting_tokens(a: RunTrace, b: RunTrace, at: int) -> tuple[int | None, int | None]:
    """The token of each answer where ``a`` and ``b`` part at character ``at``.

    Mostly the token that covers ``at``. But when one answer has a token edge exactly at ``at`` while the other's
    token runs on across it (" the" + " steps" against " these"), the first answer's choice was to *end* a token
    there: its decision is the token that ends at ``at`` (" the", which replaced the draft " these"), not the
    unrelated token after it (" steps")."""
    covering = [token_at(a, at), token_at(b, at)]
    starts = [tr.tokens[i].start if i is not None else None for tr, i in zip((a, b), covering)]
    chosen = list(covering)
    for side, trace in enumerate((a, b)):
        mine, theirs = starts[side], starts[1 - side]
        if mine == at and theirs is not None and theirs < at:  # an edge here, the other's token crosses it
            ended = [t.index for t in trace.tokens if t.end == at and t.start < t.end]
            if ended:
                chosen[side] = ended[-1]
    return chosen[0], chosen[1]


def _p(value) -> str:
    return f"{value:.2f}" if isinstance(value, int | float) and not isinstance(value, bool) else "?"


def _probs(details) -> str:
    probs = details.probs if isinstance(getattr(details, "probs", None), dict) else {}
    parts = [f"{name} {_p(p)}" for name, p in probs.items()]
    if isinstance(details.mean_prob, int | float):
        parts.append(f"weighted mean {_p(details.mean_prob)}")
    return ", ".join(parts)


def decision_line(trace: RunTrace, index: int | None, label: str | None = None) -> str:
    """One sentence: what run ``label`` decided at token ``index``, with the numbers that decided it."""
    who = label or trace.method
    if index is None or not 0 <= index < len(trace.tokens):
        return f"{who} had already ended its answer here."
    t: TokenRecord = trace.tokens[index]
    text, d = repr(trace.text[t.start:t.end]), t.details
    draft = t.fusion.draft if t.fusion is not None and t.fusion.draft is not None else None
    if t.decision == Decision.ENSEMBLED_REPLACED:
        numbers = _probs(d) if isinstance(d, CheckedDetails) else ""
        fused = f"; fused probability {_p(d.fused_prob)}" if _p(getattr(d, "fused_prob", None)) != "?" else ""
        return (f"{who} replaced {trace.drafter or t.model}'s {draft!r} with {text} (token #{index}): "
                f"{numbers or 'the verifiers disagreed'}{fused}.")
    if t.decision == Decision.ENSEMBLED_KEPT:
        return f"{who} fused here and kept {trace.drafter or t.model}'s {text} (token #{index}): {_probs(d)}."
    if t.decision == Decision.CONSENSUS:
        return f"{who} accepted {t.model}'s {text} (token #{index}): the verifiers agreed ({t.condition}; {_probs(d)})."
    if t.decision == Decision.OOV_BLOCKED and isinstance(d, OovBlockedDetails):
        blocked = ", ".join(d.blocked_by or []) or "a verifier"
        return (f"{who} accepted {t.model}'s {text} unchecked (token #{index}): {blocked} has no token edge there, "
                "so fusing would have handed it a prefix it never produces.")
    if t.decision == Decision.GATED and isinstance(d, GatedDetails):
        return (f"{who} kept {d.primary or t.model}'s {text} at GaC's gate (token #{index}): its top probability "
                f"{_p(d.primary_top)} is at least {_p(d.gate)}.")
    if t.decision == Decision.FUSED and isinstance(d, FusedDetails):
        support = ", ".join(f"{m} {_p(p)}" for m, p in (d.support or {}).items())
        return f"{who} fused every model's distribution and chose {text} (token #{index}): {support or 'no support recorded'}."
    if t.decision == Decision.SEGMENT:
        rnd = trace.rounds[t.round] if t.round is not None and 0 <= t.round < len(trace.rounds) else None
        if rnd is not None:
            scores = ", ".join(f"{c.get('model')} {_p(s)}" for c, s in zip(rnd.candidates, rnd.aggregate))
            return (f"{who}: {text} (token #{index}) is in {rnd.winner}'s segment, which won round {rnd.index} "
                    f"(scores {scores}).")
        return f"{who}: {text} (token #{index}) is in {t.model}'s winning segment."
    return f"{who}: {t.model} alone wrote {text} (token #{index}); nothing was ensembled there."


@dataclass
class Divergence:
    """Two answers to one question: where they part (``at``: characters they share; None: equal) and the token
    of each run there."""

    labels: tuple[str, str]
    traces: tuple[RunTrace, RunTrace]
    at: int | None
    indices: tuple[int | None, int | None]
    comparison: dict

    def lines(self) -> list[str]:
        if self.at is None:
            return ["Both answers are the same text."]
        shared = self.traces[0].text[: self.at]
        return [f"They share {self.at} character(s): …{shared[-60:]!r}" if self.at else "They differ from the first character.",
                *(decision_line(tr, i, lab) for tr, i, lab in zip(self.traces, self.indices, self.labels))]

    def to_dict(self) -> dict:
        return {"methods": list(self.labels), "divergence": self.at, "tokens": list(self.indices),
                "decisions": self.lines()[1:] if self.at is not None else [], "summary": self.lines(),
                "texts": [t.text for t in self.traces], "diff": self.comparison["diff"],
                "coarse": self.comparison.get("coarse", False)}


def divergence(a: RunTrace, b: RunTrace, labels: tuple[str, str] = ("A", "B")) -> Divergence:
    """Where answers ``a`` and ``b`` part, and each run's token there."""
    comparison = compare_texts(a.text, b.text).to_dict()
    at = comparison["divergence"]
    indices = (None, None) if at is None else parting_tokens(a, b, at)
    return Divergence((labels[0], labels[1]), (a, b), at, indices, comparison)


def answers_divergence(folder, qid: int, methods: tuple[str, str]) -> Divergence:
    """Where two methods' answers to question ``qid`` of an opened evaluation folder (:func:`.explorer.open_folder`)
    part; a clear error when the question, a method or a trace is not there."""
    if isinstance(qid, bool) or not isinstance(qid, int) or qid not in folder.question_ids:
        raise EvaluationError(f"Question {str(qid)[:20]} is not in this evaluation; it has questions "
                              f"{', '.join(map(str, folder.question_ids[:12]))}{' …' if len(folder.question_ids) > 12 else ''}.")
    if len(methods) != 2 or methods[0] == methods[1]:
        raise EvaluationError("Pick two different methods, e.g. --methods single:qwen,safe-unite.")
    traces = []
    for method in methods:
        if method not in folder.methods:
            raise EvaluationError(f"{method[:40]!r} is not a method of this evaluation: {', '.join(folder.methods)}.")
        trace = folder.trace(qid, method)
        if trace is None:
            raise EvaluationError(f"No trace of {method} on question {qid}: {folder.traces_note or 'its run failed or is missing'}")
        traces.append(trace)
    return divergence(traces[0], traces[1], (methods[0], methods[1]))
