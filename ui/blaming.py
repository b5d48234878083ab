"""The Results tab's "Find the decision that changed this answer" (:mod:`ensemble.evaluation.blame`): an attribution
recorded in the folder (``blame.jsonl``) shows at once; otherwise the app reverts the answer's decisions with its own
models (a few forks, with progress) and keeps the result for the session's folder. "Open token #N" replays the answer
in the Run tab with that token selected in the strip and the inspector, and the counterfactual answer beside it in
the fork view. ``blame_answer`` is the same for API and MCP clients."""

from __future__ import annotations

import gradio as gr

import visual
from ensemble.errors import EnsembleError
from ensemble.evaluation.blame import Blame, counterfactual, model_forks, prepare, search
from ensemble.evaluation.blame_store import blame_table, load_fork, prepare_labels, read_blame, targets
from ensemble.evaluation.explorer import Folder, open_folder
from ensemble.members.home import homed
from ensemble.trace import RunTrace
from visual.blame import blame_figure, blame_html, blame_table_html, outcome_line

from . import config

APP_MAX_FORKS = 3
"""The forks one click may run (each is a whole continuation of the answer: about a minute on two CPU cores);
``python -m ensemble blame --max-forks`` goes further."""


def _state(folder: Folder) -> dict:
    """The folder's attributions: recorded ones (read once) and the session's own (with their decisive forks)."""
    if not hasattr(folder, "_blame_state"):
        try:
            recorded = read_blame(folder.path)
        except EnsembleError:
            recorded = {}
        folder._blame_state = {"records": recorded, "forks": {}, "labels": {}}
    return folder._blame_state


def _pair(folder: Folder, method: str) -> tuple[str, str] | None:
    labels = _state(folder)["labels"]
    if method not in labels:
        try:
            labels[method] = prepare_labels(folder, method, None)[0]
        except EnsembleError:
            labels[method] = None
    return labels[method]


def record_for(folder: Folder, qid: int, method: str, reference: str | None = None) -> Blame | None:
    state = _state(folder)
    if reference is None:
        pair = _pair(folder, method)
        reference = pair[1] if pair else None
    return state["records"].get((qid, method, reference))


def blame_marks(folder: Folder) -> dict[tuple[int, str], str]:
    """(question, ensemble method) -> its cell's button label, for every answer whose outcome differs from its
    drafter alone's: the recorded decisive token, or "find the decision"."""
    if not folder.has_traces:
        return {}
    marks = {}
    for method in folder.ensembles():
        pair = _pair(folder, method)
        if pair is None:
            continue
        for q in targets(folder, *pair):
            found = record_for(folder, q, method)
            if found is None:
                marks[(q, method)] = "find the decision"
            elif found.decisive is not None:
                marks[(q, method)] = f"decisive: #{found.decisive}"
            else:
                marks[(q, method)] = "no single decision" if found.status != "budget" else "find more decisions"
    return marks


def find(folder: Folder | None, qid, method, reference=None, progress=None) -> str:
    """The attribution of one answer as HTML: recorded, or computed now with the app's models."""
    if folder is None:
        return '<p class="el-muted">Open an evaluation folder first.</p>'
    try:
        qid = int(qid)
        blame, trace = prepare(folder, qid, str(method or ""), reference or None)
        state = _state(folder)
        known = state["records"].get((qid, blame.method, blame.reference))
        if known is None or (known.status == "budget" and len(known.tried) < APP_MAX_FORKS):
            forks = model_forks(config.POOL, homed)
            tick = (lambda done, planned, entry: progress((done, planned), desc=f"reverted token #{entry['index']}: "
                                                          f"answers {entry['prediction']}")) if progress else None
            if progress is not None:
                progress((0, min(len(blame.decisions), APP_MAX_FORKS)), desc="reverting the earliest decision…")
            kept = {}
            known = search(blame, trace, forks, APP_MAX_FORKS, tick, keep=lambda index, t: kept.update({index: t}))
            state["records"][(qid, blame.method, blame.reference)] = known
            if known.decisive is not None and known.decisive in kept:
                state["forks"][(qid, blame.method, known.decisive)] = kept[known.decisive]
    except (EnsembleError, ValueError, TypeError) as exc:
        return visual.error_html(str(exc))
    return blame_html(known.to_dict(), known.summary())


def _needs_forks(folder: Folder, qid, method) -> bool:
    try:
        blame, _ = prepare(folder, int(qid), str(method or ""), None)
    except (EnsembleError, ValueError, TypeError):
        return False  # find() says why, at once
    known = _state(folder)["records"].get((blame.qid, blame.method, blame.reference))
    return known is None or (known.status == "budget" and len(known.tried) < APP_MAX_FORKS)


def ask(folder: Folder | None, qid, method) -> str:
    """A grid cell's "find the decision": a recorded attribution at once; otherwise a note, and the search is left
    for :func:`run_asked` (the app runs it next, in the queue of runs that load models)."""
    if folder is not None and _needs_forks(folder, qid, method):
        folder._blame_asked = (qid, method)
        return (f'<p class="el-muted">Question {visual.safe(qid)}, {visual.safe(method)}: reverting the ensemble\'s decisions '
                f"one at a time, earliest first (at most {APP_MAX_FORKS} forks, each a whole continuation)…</p>")
    return find(folder, qid, method)


def run_asked(folder: Folder | None, progress=None):
    """The search :func:`ask` left, as HTML; None when there is none."""
    asked = getattr(folder, "_blame_asked", None) if folder is not None else None
    if asked is None:
        return None
    folder._blame_asked = None
    return find(folder, *asked, progress=progress)


def decisive_fork(folder: Folder, qid: int, method: str, index: int) -> RunTrace | None:
    return _state(folder)["forks"].get((qid, method, index)) or load_fork(folder.path, qid, method, index)


def open_token(folder: Folder | None, data: dict):
    """(the answer's trace, the token, the fork view's HTML, the status line) for an "Open token #N" click, or
    (None, None, a sentence, "") when there is nothing to open."""
    qid, method, index = data.get("qid"), data.get("method"), data.get("index")
    if folder is None or not isinstance(qid, int) or not isinstance(method, str) or not isinstance(index, int):
        return None, None, '<p class="el-muted">Find the decision of a cell first.</p>', ""
    found = record_for(folder, qid, method)
    trace = folder.readable_trace(qid, method)
    if found is None or trace is None or found.decisive != index or not 0 <= index < len(trace.tokens):
        return None, None, '<p class="el-muted">That decision is not recorded for this folder.</p>', ""
    data = found.to_dict()
    forked = decisive_fork(folder, qid, method, index)
    entry = found.decisive_entry()
    view = outcome_line(data)
    if forked is not None:
        view += visual.fork_html(trace, forked, counterfactual(trace, entry))
    else:
        comparison = counterfactual(trace, entry)
        view += (f'<div class="el-fork">{visual.forks._side("the run", comparison["diff"], 0, comparison["divergence"], False)}'
                 f'{visual.forks._side("the reversal", comparison["diff"], 1, comparison["divergence"], False)}</div>')
    status = (f"Question {qid}, {method}: answered {found.prediction}, gold {found.gold} ({'right' if found.correct else 'wrong'}). "
              f"Token #{index} is the decision that changed it: reverted, the answer is {entry['prediction']}.")
    return trace, index, view, status


def stats(folder: Folder | None):
    """The dataset table and chart of the folder's attributions (recorded and the session's)."""
    if folder is None or not folder.has_traces:
        return "", None
    rows = blame_table(folder, _state(folder)["records"])
    return blame_table_html(rows), blame_figure(rows)


def blame_answer(qid: int, method: str, reference: str = "") -> dict:
    """Which ensemble decision changed one answer of this project's GSM8K run (docs/results.md): the earliest
    decision whose reversal alone (a fork with the drafter's key forced, the ensemble going on) flips the graded
    outcome, every decision tried and what it answered, and what the search cost. Answers recorded in the run's
    blame.jsonl come at once; others run up to 3 forks with the server's models.

    Args:
        qid: the question number (a GSM8K test line, as the Results tab's grid shows it).
        method: the ensemble's method label, e.g. "safe-unite@qwen+smollm2" or "safe-gac".
        reference: the method to compare with (default: the drafter alone, "single:qwen").

    Returns:
        The attribution: {"qid", "method", "reference", "outcome" (lost | won), "status" (decisive | none | budget |
        no-decisions), "decisive" (token index or null), "decisions", "tried" (each with "prediction", "correct",
        "flipped", "continuation"), "not_decisive", "untried", "cost", "summary"}.
    """
    from .results import COMMITTED_RUN

    try:
        if isinstance(qid, str) and qid.strip().isdigit() and len(qid.strip()) < 12:
            qid = int(qid.strip())
        folder = open_folder(COMMITTED_RUN)
        blame, trace = prepare(folder, qid, str(method or ""), reference or None)
        known = read_blame(folder.path).get((blame.qid, blame.method, blame.reference))
        if known is None:
            known = search(blame, trace, model_forks(config.POOL, homed), APP_MAX_FORKS)
        return {**known.to_dict(), "summary": known.summary()}
    except (EnsembleError, ValueError, TypeError) as exc:
        raise gr.Error(str(exc)) from exc
