"""Which decision lost (or won) an answer: counterfactual attribution from an evaluation row to one decision.

The first place where two answers part is rarely what decided them. Here every ensemble decision that changed what
the drafter would have written (:func:`decisions`: a SAFE replacement by consensus outvote or by a sharpening swap,
another fused replacement, a SpecEM segment won by another model) is reverted on its own: the answer is forked at
that token with the drafter's key forced and the ensemble method continuing (:mod:`ensemble.fork`), and the
continuation is graded with the evaluation's own extraction (:mod:`.answers`). The earliest decision whose reversal
alone flips the outcome is *decisive*; the decisions tried before it are *not decisive*; a search that runs out of
decisions or of its fork budget says so.

The search costs one fork per decision tried (earliest first, stopping at the first flip, at most ``max_forks``);
the models stay loaded between forks, and every fork reports its tokens and seconds. A decision whose drafter key
was the end of the answer needs no run: the counterfactual is the kept text itself.

Nothing here loads a model: :func:`blame_answer` takes a ``fork`` callable (``fork(trace, at, force) -> RunTrace``,
:func:`model_forks` builds the real one from a model pool).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from ..capabilities import capabilities
from ..errors import EnsembleError, EvaluationError, InputError
from ..fork import check_force, compare_texts, fork_point
from ..trace import RunTrace
from ..trace.decisions import Decision
from .answers import extract_answer, same_number
from .explorer import Folder

KINDS = {
    "outvote": "consensus outvote",
    "sharpening": "sharpening swap",
    "fused": "fused replacement",
    "segment": "SpecEM segment",
}
"""A decision's kind (key -> what the tables call it). ``outvote``: the members' fused vote put another key above
the draft before any sharpening; ``sharpening``: the draft led the fused vote and sharpening put another key first;
``fused``: any other fused choice that is not the drafter's key; ``segment``: a SpecEM round won by another model."""
DEFAULT_MAX_FORKS = 8
EOS = "<eos>"


@dataclass
class Candidate:
    """One ensemble decision that changed the drafter's token.

    Attributes:
        index: the token's index in the answer (the strip's ``data-i``).
        kind: a key of :data:`KINDS`.
        draft: the drafter's key there (what a reversal forces; ``<eos>``: the drafter would have ended).
        chosen: what the ensemble wrote instead.
        carried_by: the member whose vote carried the choice (the highest probability of it other than the drafter's;
            a segment's winner).
        start: the character where the decision is.
    """

    index: int
    kind: str
    draft: str
    chosen: str
    carried_by: str | None
    start: int

    def to_dict(self) -> dict:
        return asdict(self)


def _key_prob(top, key: str) -> float:
    for pair in top or []:
        if isinstance(pair, list | tuple) and len(pair) == 2 and pair[0] == key and isinstance(pair[1], int | float):
            return float(pair[1])
    return 0.0


def _leader(top) -> str | None:
    return top[0][0] if top and isinstance(top[0], list | tuple) and top[0] else None


def _carrier(fusion, key: str, drafter: str | None) -> str | None:
    probs = {m: _key_prob(top, key) for m, top in (fusion.per_model or {}).items() if m != drafter}
    best = max(probs, key=probs.get, default=None)
    return best if best is not None and probs[best] > 0 else None


def _replaced(trace: RunTrace, t) -> Candidate | None:
    f = t.fusion
    if f is None or f.draft is None or f.draft == f.choice:
        return None
    kind = "fused"
    if _leader(f.before) == f.draft and f.sharpened and _leader(f.after) != f.draft:
        kind = "sharpening"
    elif _leader(f.before) == f.choice:
        kind = "outvote"
    return Candidate(t.index, kind, f.draft, trace.text[t.start:t.end], _carrier(f, f.choice, trace.drafter), t.start)


def _every_token(trace: RunTrace, t) -> Candidate | None:
    f, first = t.fusion, trace.models[0] if trace.models else None
    own = _leader((f.per_model or {}).get(first)) if f is not None else None
    if own is None or own == f.choice:
        return None
    return Candidate(t.index, "fused", own, trace.text[t.start:t.end], _carrier(f, f.choice, first), t.start)


def _segments(trace: RunTrace) -> list[Candidate]:
    first, found = (trace.models[0] if trace.models else None), []
    starts = {t.start: t.index for t in reversed(trace.tokens)}
    for r in trace.rounds:
        if not r.winner or r.winner == first or r.start not in starts:
            continue
        mine = next((c.get("text") for c in r.candidates if isinstance(c, dict) and c.get("model") == first), None)
        if isinstance(mine, str) and mine:
            found.append(Candidate(starts[r.start], "segment", mine, r.accepted_text, r.winner, r.start))
    return found


def decisions(trace: RunTrace) -> list[Candidate]:
    """The answer's decisions that changed what its drafter would have written, earliest first."""
    caps = capabilities(trace.method)
    if caps is not None and caps.segments:
        return _segments(trace)
    found = []
    for t in trace.tokens:
        if t.decision == Decision.ENSEMBLED_REPLACED:
            c = _replaced(trace, t)
        elif t.decision == Decision.FUSED:
            c = _every_token(trace, t)
        else:
            c = None
        if c is not None:
            found.append(c)
    return found


def revertible(trace: RunTrace, c: Candidate) -> str:
    """Why a decision cannot be reverted by a fork ("" when it can): a key that is part of a character."""
    if c.draft == EOS:
        return ""
    try:
        check_force(c.draft)
    except InputError as exc:
        return str(exc)
    return ""


ForkFn = Callable[[RunTrace, int, str], RunTrace]


@dataclass
class Blame:
    """The attribution of one answer (``to_dict`` is what ``blame.jsonl`` and ``--json`` hold)."""

    qid: int
    method: str
    reference: str
    gold: str | None
    prediction: str | None
    correct: bool
    reference_prediction: str | None
    reference_correct: bool
    decisions: list[dict] = field(default_factory=list)
    tried: list[dict] = field(default_factory=list)
    decisive: int | None = None
    status: str = "none"  # decisive | none (every decision tried) | budget (max_forks reached first) | no-decisions
    max_forks: int = DEFAULT_MAX_FORKS
    cost: dict = field(default_factory=lambda: {"forks": 0, "tokens": 0, "seconds": 0.0})

    @property
    def outcome(self) -> str:
        return "lost" if self.reference_correct and not self.correct else "won"

    def decisive_entry(self) -> dict | None:
        return next((t for t in self.tried if t["index"] == self.decisive), None)

    def not_decisive(self) -> list[int]:
        return [t["index"] for t in self.tried if not t["flipped"]]

    def untried(self) -> list[int]:
        done = {t["index"] for t in self.tried}
        return [d["index"] for d in self.decisions if d["index"] not in done]

    def to_dict(self) -> dict:
        out = asdict(self)
        out.update(outcome=self.outcome, not_decisive=self.not_decisive(), untried=self.untried())
        return out

    @classmethod
    def from_dict(cls, data: dict) -> Blame:
        names = cls.__dataclass_fields__
        return cls(**{k: v for k, v in data.items() if k in names})

    def summary(self) -> str:
        """One sentence: the answer, and its decisive decision or why none was named."""
        head = (f"Question {self.qid}, {self.method} {self.outcome} against {self.reference} "
                f"(answered {self.prediction}, gold {self.gold}; {self.reference} answered {self.reference_prediction})")
        cost = f"{self.cost['forks']} fork(s), {self.cost['tokens']} tokens, {self.cost['seconds']:.0f} s"
        d = self.decisive_entry()
        if d is not None:
            return (f"{head}: the decisive decision is token #{d['index']}, a {KINDS[d['kind']]} of the drafter's "
                    f"{d['draft']!r} for {d['chosen']!r} carried by {d['carried_by'] or 'the fused vote'}; reverted, the "
                    f"answer is {d['prediction']} ({'right' if d['correct'] else 'wrong'}). Cost: {cost}.")
        if self.status == "no-decisions":
            return f"{head}: the ensemble changed none of the drafter's tokens, so no single decision is to blame."
        if self.status == "budget":
            return (f"{head}: none of the first {len(self.tried)} decisions is decisive; {len(self.untried())} more were "
                    f"not tried (--max-forks {self.max_forks}). Cost: {cost}.")
        return f"{head}: no single decision is decisive: reverting any one of the {len(self.tried)} leaves the outcome. Cost: {cost}."


def _labels(folder: Folder, method: str | None, reference: str | None, trace: RunTrace | None = None) -> tuple[str, str]:
    ensembles = folder.ensembles()
    method = method or (ensembles[0] if ensembles else None)
    if method not in folder.methods:
        raise EvaluationError(f"{str(method)[:60]!r} is not a method of this evaluation; its methods: {', '.join(folder.methods)}.")
    if reference is None:
        drafter = trace.drafter if trace is not None else None
        reference = next((s for s in folder.singles() if drafter and s.split(":", 1)[1].split("@")[0] == drafter.split("@")[0]),
                         folder.best_single())
    if reference not in folder.methods or reference == method:
        raise EvaluationError(f"{str(reference)[:60]!r} is not another method of this evaluation to compare with; "
                              f"its methods: {', '.join(folder.methods)}.")
    return method, reference


def prepare(folder: Folder, qid: int, method: str | None = None, reference: str | None = None) -> tuple[Blame, RunTrace]:
    """The attribution to fill for question ``qid`` (its decisions listed, nothing tried) and the answer's trace.

    Raises:
        EvaluationError: an unknown question or method, no trace kept, or two methods alike in correctness."""
    if qid not in folder.question_ids:
        raise EvaluationError(f"Question {qid} is not in this evaluation.")
    first, _ = _labels(folder, method, reference)
    trace = folder.trace(qid, first)
    if trace is None:
        raise EvaluationError(f"The evaluation kept no trace of question {qid} for {first}, so its decisions cannot be reverted.")
    method, reference = _labels(folder, first, reference, trace)
    row, ref = folder.row(qid, method), folder.row(qid, reference)
    if row is None or ref is None:
        raise EvaluationError(f"Question {qid} has no answer of {method if row is None else reference} in this evaluation.")
    correct, ref_correct = bool(row.get("correct")), bool(ref.get("correct"))
    if correct == ref_correct:
        raise EvaluationError(f"On question {qid}, {method} and {reference} are both {'right' if correct else 'wrong'}: "
                              "there is no change of outcome to attribute.")
    found = [c for c in decisions(trace) if not revertible(trace, c)]
    blame = Blame(qid, method, reference, row.get("gold"), row.get("prediction"), correct, ref.get("prediction"), ref_correct,
                  [c.to_dict() for c in found], status="none" if found else "no-decisions")
    return blame, trace


def grade(text: str, gold: str | None) -> tuple[str | None, bool]:
    """The evaluation's extraction and comparison (:func:`.scoring.make_row`'s) on one text."""
    prediction = extract_answer(text)
    return prediction, same_number(prediction, gold)


def search(blame: Blame, trace: RunTrace, fork: ForkFn, max_forks: int = DEFAULT_MAX_FORKS,
           progress: Callable[[int, int, dict], None] | None = None, keep: Callable[[int, RunTrace], None] | None = None) -> Blame:
    """Revert the decisions earliest first until one flips the outcome or ``max_forks`` forks ran (counting those
    ``blame.tried`` already holds, which are not run again).

    Args:
        fork: runs one fork (``fork(trace, at, force)``) to its end.
        progress: called after each decision as ``progress(done, planned, entry)``.
        keep: called with the decisive fork's trace (the batch saves it beside the record).
    """
    blame.max_forks = max_forks
    planned = min(len(blame.decisions), max_forks)
    done = {t["index"] for t in blame.tried}  # a search continued from its record (a larger --max-forks) skips these
    runs = len(blame.tried)
    for c in blame.decisions:
        if blame.decisive is not None or runs >= max_forks:
            break
        if c["index"] in done:
            continue
        at, chars = fork_point(trace, c["index"])
        started = time.monotonic()
        if c["draft"] == EOS:
            text, tokens = trace.text[:chars], 0
        else:
            try:
                forked = fork(trace, at, c["draft"])
            except EnsembleError as exc:
                blame.tried.append({**c, "error": str(exc), "prediction": None, "correct": blame.correct, "flipped": False,
                                    "continuation": "", "tokens": 0, "seconds": 0.0})
                continue
            text, tokens = forked.text, len(forked.tokens)
        seconds = round(time.monotonic() - started, 2)
        runs += 1
        prediction, correct = grade(text, blame.gold)
        entry = {**c, "prediction": prediction, "correct": correct, "flipped": correct != blame.correct,
                 "continuation": text[chars:], "kept_chars": chars, "tokens": tokens, "seconds": seconds}
        blame.tried.append(entry)
        blame.cost = {"forks": blame.cost["forks"] + (1 if tokens else 0), "tokens": blame.cost["tokens"] + tokens,
                      "seconds": round(blame.cost["seconds"] + seconds, 2)}
        if entry["flipped"]:
            blame.decisive = c["index"]
            if keep is not None and c["draft"] != EOS:
                keep(c["index"], forked)
        if progress is not None:
            progress(len(blame.tried), planned, entry)
    if blame.decisive is not None:
        blame.status = "decisive"
    elif blame.decisions:
        blame.status = "budget" if blame.untried() else "none"
    return blame


def blame_answer(folder: Folder, qid: int, fork: ForkFn, method: str | None = None, reference: str | None = None,
                 max_forks: int = DEFAULT_MAX_FORKS, progress=None, keep=None) -> Blame:
    """:func:`prepare` then :func:`search`: the decisive decision of one answer (see the module docstring)."""
    blame, trace = prepare(folder, qid, method, reference)
    return search(blame, trace, fork, max_forks, progress, keep)


def counterfactual(trace: RunTrace, entry: dict) -> dict:
    """The fork view's comparison of the answer and one tried reversal (from what the record kept)."""
    chars = int(entry.get("kept_chars") or 0)
    return compare_texts(trace.text[chars:], str(entry.get("continuation") or ""), trace.text[:chars]).to_dict()


def model_forks(pool, advance=None) -> ForkFn:
    """The real fork runner on a :class:`~ensemble.models.ModelPool` (the models load once and stay for every fork);
    ``advance``: how each fork's events are advanced (the app passes :func:`ensemble.members.home.homed`)."""
    from ..fork import complete_fork, fork_request, member_names

    def run(trace: RunTrace, at: int, force: str) -> RunTrace:
        request = fork_request(trace, at, trace.method, force, check=False)
        models = pool.get_many(member_names(trace, trace.method))
        forked, _ = complete_fork(request, models, trace, advance)
        return forked

    return run
