"""The Results tab's logic: open an evaluation (the project's own run, an uploaded ``summary.csv``, or an uploaded
``.zip`` of an evaluation folder), and explore it: the question x method grid with its filters, a cell opened in
the Run tab's views (from the folder's kept trace: no model is loaded), two answers where they part, and the
decision statistics. ``app.py`` wires these to the components of :class:`ui.tabs.ResultsTab`."""

from __future__ import annotations

import re
import tempfile
import zipfile
from pathlib import Path
from typing import Any, NamedTuple

import gradio as gr

import visual
from ensemble.errors import EnsembleError, EvaluationError
from ensemble.evaluation import load_summary
from ensemble.evaluation.decision_stats import decision_stats
from ensemble.evaluation.divergence import answers_divergence
from ensemble.evaluation.explorer import FILTERS, SORTS, Folder, filter_questions, open_folder
from visual.evalstats import decisions_figure, first_replacement_figure, stats_html, weights_trajectories_figure
from visual.explorer import answer_html, divergence_html, grid_html

from .api_args import without_path
from .files import project_file
from .view_tuples import KEEP, ResultsView

COMMITTED_RUN = project_file("docs/results/gsm8k-60-traced/")
"""The project's GSM8K run with every answer's trace (docs/results.md), opened by the tab's button."""
MAX_ZIP_BYTES = 256 * 1024 * 1024  # unpacked
MAX_ZIP_FILES = 20_000
_MEMBER = re.compile(r"(?:[^/]+/)?(meta\.json|rows\.jsonl|summary\.csv|traces/[^/]+/\d+\.json\.gz)")
FILTER_CHOICES = [(text, key) for key, text in FILTERS.items()]
SORT_CHOICES = [(text, key) for key, text in SORTS.items()]


class ExplorerView(NamedTuple):
    """The explorer's components (``ui.tabs.ResultsTab``), filled when an evaluation folder opens (a field left at
    ``KEEP`` leaves its component as it is)."""

    explorer_box: Any = KEEP
    grid_filter: Any = KEEP
    grid_ensemble: Any = KEEP
    grid_order: Any = KEEP
    grid: Any = KEEP
    cell_note: Any = KEEP
    part_qid: Any = KEEP
    part_a: Any = KEEP
    part_b: Any = KEEP
    part_view: Any = KEEP
    stats_view: Any = KEEP
    stats_plot_a: Any = KEEP
    stats_plot_b: Any = KEEP
    stats_plot_c: Any = KEEP


def show_summary(file) -> ResultsView:
    """A ``summary.csv`` (or the folder holding one) as the results table and its two charts."""
    if file is None:
        return ResultsView("<p>Upload the summary.csv written by <code>python -m ensemble evaluate</code>.</p>")
    try:
        rows = load_summary(path := file if isinstance(file, str | Path) else file.name)
    except EnsembleError as exc:
        return ResultsView(visual.error_html(without_path(str(exc), str(path))))  # the upload's name, not the server's path
    figures = visual.results_figures(rows)
    return ResultsView(visual.results_html(rows), figures[0] if figures else None, figures[1] if len(figures) > 1 else None)


def unpack_folder(path: str | Path) -> Path:
    """An uploaded ``.zip`` of an evaluation folder, unpacked into a fresh temporary folder. Only the files an
    evaluation folder holds are taken (meta.json, rows.jsonl, summary.csv, traces/*/N.json.gz, at the top or in
    one folder), within size and count limits; nothing else in the archive is written anywhere."""
    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as exc:
        raise EvaluationError(f"The upload is not a readable .zip file ({exc}).") from exc
    with archive:
        members = [m for m in archive.infolist() if not m.is_dir() and _MEMBER.fullmatch(m.filename)]
        if len(members) > MAX_ZIP_FILES or sum(m.file_size for m in members) > MAX_ZIP_BYTES:
            raise EvaluationError("The .zip is too large for an evaluation folder (at most 20,000 files, 256 MB unpacked).")
        if not any(m.filename.endswith("meta.json") for m in members):
            raise EvaluationError("The .zip holds no evaluation folder: zip the folder `evaluate --out` wrote "
                                  "(meta.json, rows.jsonl, summary.csv, traces/).")
        target = Path(tempfile.mkdtemp(prefix="ensemble-lens-eval-"))
        for member in members:
            relative = _MEMBER.fullmatch(member.filename).group(1)  # the part after the one folder, never ".."
            dest = target / relative
            dest.parent.mkdir(parents=True, exist_ok=True)
            with archive.open(member) as src:
                dest.write_bytes(src.read(MAX_ZIP_BYTES + 1))
    return target


def open_evaluation(path: str | Path) -> tuple[ResultsView, ExplorerView, Folder | None]:
    """An evaluation folder (or an uploaded .zip of one, or a bare summary.csv): the summary, the explorer."""
    path = Path(path)
    try:
        if path.suffix.lower() == ".zip":
            path = unpack_folder(path)
        if path.is_file():  # a summary.csv alone: the table and charts, no grid
            return show_summary(str(path)), ExplorerView(explorer_box=gr.update(visible=False)), None
        summary = show_summary(str(path))
        folder = open_folder(path)
    except EnsembleError as exc:
        return ResultsView(visual.error_html(str(exc))), ExplorerView(explorer_box=gr.update(visible=False)), None
    return summary, explorer_view(folder), folder


def explorer_view(folder: Folder) -> ExplorerView:
    """The grid, its filters and the comparison's choices: everything that reads only ``rows.jsonl``, so the grid
    shows at once. The decision statistics read every trace: :func:`stats_view` fills them next (the app chains it)."""
    ensembles = folder.ensembles()
    best = folder.best_single()
    second = ensembles[0] if ensembles else (folder.methods[1] if len(folder.methods) > 1 else None)
    first = best or folder.methods[0]
    waiting = (f'<p class="el-muted el-stats-waiting">Reading the {len(folder.traced)} kept traces for the decision statistics '
               "(on a laptop's CPU this takes about half a minute the first time); the grid above works meanwhile…</p>")
    return ExplorerView(
        explorer_box=gr.update(visible=True),
        grid_filter=gr.update(choices=FILTER_CHOICES, value="all"),
        grid_ensemble=gr.update(choices=ensembles, value=ensembles[0] if ensembles else None, visible=bool(ensembles)),
        grid_order=gr.update(choices=SORT_CHOICES, value="qid"),
        grid=grid_html(folder, folder.question_ids),
        cell_note='<p class="el-muted">Click a cell: with traces its answer opens in the Run tab\'s views, else its text shows here.</p>',
        part_qid=gr.update(choices=folder.question_ids, value=folder.question_ids[0] if folder.question_ids else None),
        part_a=gr.update(choices=folder.methods, value=first),
        part_b=gr.update(choices=folder.methods, value=second if second != first else None),
        part_view="",
        stats_view=waiting if folder.has_traces else f'<p class="el-muted">{visual.safe(folder.traces_note)}</p>',
        stats_plot_a=gr.update(visible=False),
        stats_plot_b=gr.update(visible=False),
        stats_plot_c=gr.update(visible=False),
    )


_STATS_CACHE: dict[tuple[str, int, int], dict] = {}
"""The committed run's decision statistics, once per process (its folder does not change while the app runs)."""


def folder_stats(folder: Folder) -> dict:
    """:func:`decision_stats` of ``folder``; the project's own run's computed once per process (every visitor who
    opens it after the first gets them at once), an uploaded folder's each time."""
    try:
        committed = folder.path.resolve() == COMMITTED_RUN.resolve()
    except OSError:
        committed = False
    if not committed:
        return decision_stats(folder)
    rows = (folder.path / "rows.jsonl").stat()
    key = (str(folder.path.resolve()), rows.st_mtime_ns, rows.st_size)
    if key in _STATS_CACHE:
        return _STATS_CACHE[key]
    stats = decision_stats(folder)
    if stats.get("complete", True):  # a count cut short by a time budget is not kept: the next visitor reads on
        _STATS_CACHE[key] = stats
    return stats


def stats_view(folder: Folder | None) -> ExplorerView:
    """The decision statistics (tables and charts) of an opened folder with traces; nothing changes otherwise."""
    if folder is None or not folder.has_traces:
        return ExplorerView()
    stats = folder_stats(folder)
    figures = [decisions_figure(stats), first_replacement_figure(stats), weights_trajectories_figure(stats)]
    return ExplorerView(
        stats_view=stats_html(stats),
        stats_plot_a=gr.update(value=figures[0], visible=figures[0] is not None),
        stats_plot_b=gr.update(value=figures[1], visible=figures[1] is not None),
        stats_plot_c=gr.update(value=figures[2], visible=figures[2] is not None),
    )


def filtered_grid(folder: Folder | None, kind: str, ensemble: str | None, order: str) -> str:
    if folder is None:
        return '<p class="el-muted">Open an evaluation folder first.</p>'
    try:
        return grid_html(folder, filter_questions(folder, kind or "all", ensemble, order or "qid"))
    except EnsembleError as exc:
        return visual.error_html(str(exc))


def open_cell(folder: Folder | None, data: dict):
    """(the cell's trace or None, a note for the tab): a traced answer opens in the Run tab, else its text shows."""
    qid, method = data.get("qid"), data.get("method")
    if folder is None or not isinstance(method, str) or not isinstance(qid, int) or folder.row(qid, method) is None:
        return None, '<p class="el-muted">Open an evaluation, then click a cell of the grid.</p>'
    try:
        trace = folder.trace(qid, method)
    except EnsembleError as exc:
        return None, visual.error_html(str(exc))
    if trace is None:
        note = folder.traces_note or f"No trace of {method} on question {qid} (its run failed)."
        return None, f'<p class="el-warning">{visual.safe(note)}</p>' + answer_html(folder, qid, method)
    return trace, (f'<p>Question {qid}, <b>{visual.safe(method)}</b>: opened in the <b>Run</b> tab (strip, inspector, '
                   "tokenizer rows, SpecEM rounds). No model was loaded.</p>")


def parting_view(folder: Folder | None, qid, a, b) -> str:
    if folder is None:
        return '<p class="el-muted">Open an evaluation folder first.</p>'
    try:
        div = answers_divergence(folder, int(qid) if qid is not None else -1, (str(a or ""), str(b or "")))
    except (EnsembleError, ValueError) as exc:
        return visual.error_html(str(exc))
    return divergence_html(div)


def explain_answers(trace_a: dict | str, trace_b: dict | str, label_a: str = "A", label_b: str = "B") -> dict:
    """Where two answers part and what each run decided there: the first differing character, each run's token
    there, and one sentence per run with the numbers that decided it (e.g. a replaced draft token's probabilities).

    Args:
        trace_a: a trace as JSON (what run_ensemble returns, a saved trace, an evaluation's kept trace).
        trace_b: another trace of the same prompt (another method, or a fork).
        label_a: how to name the first run in the sentences.
        label_b: how to name the second run.

    Returns:
        {"methods", "divergence" (characters shared; null: equal), "tokens" (each run's token index there),
        "decisions" (a sentence per run), "summary", "texts", "diff" (word-level)}.
    """
    import json

    from ensemble.evaluation.divergence import divergence
    from ensemble.trace import RunTrace

    try:
        a, b = (RunTrace.from_json(t if isinstance(t, str) else json.dumps(t)) for t in (trace_a, trace_b))
    except (EnsembleError, ValueError, TypeError) as exc:
        raise gr.Error(str(exc)) from exc
    return divergence(a, b, (label_a, label_b)).to_dict()


def explain_run(qid: int, methods: str) -> dict:
    """Where two methods' answers to one question of this project's GSM8K run (docs/results.md) part, and what
    each run decided there (as explain_answers; the run must have kept traces).

    Args:
        qid: the question number (a GSM8K test line, as the Results tab's grid shows it).
        methods: two method labels of that run, comma-separated, e.g. "single:qwen,safe-unite".
    """
    try:
        folder = open_folder(COMMITTED_RUN)
        pair = tuple(m.strip() for m in str(methods or "").split(",") if m.strip())
        return answers_divergence(folder, qid, pair).to_dict()
    except EnsembleError as exc:
        raise gr.Error(str(exc)) from exc
