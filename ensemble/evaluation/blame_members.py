"""Member attribution: which member's vote an evaluated answer's outcome depends on.

The question is answered again with each member alone and with the ensemble without each member (the method on the
remaining members, where at least two remain; with two members "without A" is "B alone", run once), at the answer's
own settings, and each answer is graded with the evaluation's extraction. A member whose removal flips the outcome
is one the outcome depends on. A member's answer alone that the evaluation already holds (``single:NAME``) is read
from the folder, not run again.
"""

from __future__ import annotations

from collections.abc import Callable

from ..capabilities import SINGLE
from ..errors import EvaluationError
from ..fork import fork_settings
from ..settings import Settings
from .blame import grade
from .explorer import Folder

RunFn = Callable[[str, list[str], Settings, str], str]
"""``run(method, member names, settings, prompt) -> the answer's text``."""


def plans(models: list[str], method: str) -> list[tuple[str, str, list[str]]]:
    """(label, method, members) of every run: each member alone, then the ensemble without each member."""
    out = [(f"{m} alone", SINGLE, [m]) for m in models]
    if len(models) > 2:
        out += [(f"without {m}", method, [n for n in models if n != m]) for m in models]
    return out


def member_attribution(folder: Folder, qid: int, method: str, run: RunFn | None = None, pool=None,
                       say: Callable[[str], None] | None = None) -> list[dict]:
    """Each run of :func:`plans` for question ``qid``'s answer by ``method``, graded: ``label``, ``members``,
    ``prediction``, ``correct``, ``flips`` (its outcome differs from the ensemble's), ``note``."""
    trace = folder.trace(qid, method)
    row = folder.row(qid, method)
    if trace is None or row is None:
        raise EvaluationError(f"The evaluation kept no trace of question {qid} for {method}.")
    run = run or pool_runner(pool)
    correct, gold = bool(row.get("correct")), row.get("gold")
    results = []
    for label, engine, members in plans(list(trace.models), trace.method):
        without = label.startswith("without ")
        note = ""
        known = folder.row(qid, f"single:{members[0]}") if engine == SINGLE else None
        if known is not None:
            prediction, right, note = known.get("prediction"), bool(known.get("correct")), " (read from the evaluation)"
        else:
            drafter = trace.drafter if trace.drafter in members else members[0]
            settings = fork_settings(trace, engine, 0, drafter=drafter if engine != SINGLE else None)
            if say is not None:
                say(f"running {label}…")
            prediction, right = grade(run(engine, members, settings, trace.prompt), gold)
        entry = {"label": label, "members": members, "prediction": prediction, "correct": right,
                 "flips": right != correct, "note": note}
        if len(trace.models) == 2:  # "without A" is "B alone": say so on the one run
            other = [m for m in trace.models if m not in members]
            entry["label"] = f"{label} (= without {other[0]})"
        elif without and right != correct:
            entry["note"] += " — the outcome depends on this member"
        results.append(entry)
    return results


def pool_runner(pool) -> RunFn:
    """Runs on a :class:`~ensemble.models.ModelPool` (each model loads once)."""
    from ..methods import EnsembleRun

    def run(method: str, members: list[str], settings: Settings, prompt: str) -> str:
        job = EnsembleRun(pool.get_many(members), prompt, method, settings)
        for _ in job.events():
            pass
        return job.trace.text

    return run
