"""The Results tab's logic: open an evaluation (the project's own run, an uploaded ``summary.csv``, or an uploaded
``.zip`` of an evaluation folder), and explore it: the question x method grid with its filters, a cell opened in
the Run tab's views (from the folder's kept trace: no model is loaded), two answers where they part, and the
decision statistics. ``app.py`` wires these to the components of :class:`ui.tabs.ResultsTab`."""

from __future__ import annotations

import atexit
import contextlib
import logging
import re
import shutil
import tempfile
import zipfile
import zlib
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

from . import blaming
from .api_args import without_path
from .files import project_file
from .view_tuples import KEEP, ResultsView

COMMITTED_RUN = project_file("docs/results/gsm8k-60-traced/")
"""The project's GSM8K run with every answer's trace (docs/results.md), opened by the tab's button."""
MAX_ZIP_BYTES = 256 * 1024 * 1024  # unpacked
MAX_ZIP_FILES = 20_000
_MEMBER = re.compile(r"(?:[^/]+/)?(meta\.json|rows\.jsonl|summary\.csv|blame\.jsonl|traces/[^/]+/\d+\.json\.gz|blame/[^/]+/\d+-\d+\.json\.gz)")
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
    blame_view: Any = KEEP
    blame_stats: Any = KEEP
    blame_plot: Any = KEEP


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


_DAMAGED = (zipfile.BadZipFile, zlib.error, EOFError, OSError, ValueError, NotImplementedError, RuntimeError)
"""What reading a zip member raises when the archive lies or is damaged: a CRC that does not match (a header
that understates a size), a broken deflate stream, an unknown compression, an encrypted member."""
UNPACKED_PREFIX = "ensemble-lens-eval-"


def unpack_folder(path: str | Path) -> Path:
    """An uploaded ``.zip`` of an evaluation folder, unpacked into a fresh temporary folder. Only the files an
    evaluation folder holds are taken (meta.json, rows.jsonl, summary.csv, traces/*/N.json.gz, at the top or in
    one folder; blame.jsonl and blame/*/N-M.json.gz, the attributions), within size and count limits; nothing else in the archive is written anywhere. A damaged trace
    is left out (its answer then has no trace); any other damaged file refuses the upload, and a refused upload
    leaves no folder behind."""
    try:
        archive = zipfile.ZipFile(path)
    except UnicodeDecodeError:  # a name flagged UTF-8 that is not
        raise EvaluationError("The upload is not a readable .zip file: a file name in it is not valid UTF-8.") from None
    except (*_DAMAGED, RecursionError):
        raise EvaluationError("The upload is not a readable .zip file.") from None
    target = None
    try:
        with archive:
            members = [m for m in archive.infolist() if not m.is_dir() and _MEMBER.fullmatch(m.filename)]
            if len(members) > MAX_ZIP_FILES or sum(m.file_size for m in members) > MAX_ZIP_BYTES:
                raise EvaluationError("The .zip is too large for an evaluation folder (at most 20,000 files, 256 MB unpacked).")
            if not any(m.filename.endswith("meta.json") for m in members):
                raise EvaluationError("The .zip holds no evaluation folder: zip the folder `evaluate --out` wrote "
                                      "(meta.json, rows.jsonl, summary.csv, traces/).")
            target = Path(tempfile.mkdtemp(prefix=UNPACKED_PREFIX))
            for member in members:
                relative = _MEMBER.fullmatch(member.filename).group(1)  # the part after the one folder, never ".."
                try:
                    with archive.open(member) as src:
                        data = src.read(MAX_ZIP_BYTES + 1)  # never more than the header's size (which was summed)
                except _DAMAGED:
                    if relative.startswith(("traces/", "blame/")):
                        continue  # a damaged trace counts as none: its answer opens without one
                    raise EvaluationError(f"{relative} in the .zip is damaged (it does not unpack to what its header "
                                          "says), so the folder is not opened.") from None
                dest = target / relative
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.write_bytes(data)
    except BaseException:
        if target is not None:
            shutil.rmtree(target, ignore_errors=True)
        raise
    return target


_UNPACKED: set[Path] = set()  # the unpacked folders opened; whatever is left of them goes when the server ends
atexit.register(lambda: [shutil.rmtree(p, ignore_errors=True) for p in list(_UNPACKED)])


def folder_bytes(folder: Folder) -> int:
    """What an open folder holds, counted in the sessions' budget (``ui.sessions``): its rows in memory (about
    three times ``rows.jsonl``'s size) and, for an upload, its unpacked files on disk."""
    kept = 0
    for name in ("rows.jsonl", "meta.json"):
        with contextlib.suppress(OSError):
            kept += 3 * (folder.path / name).stat().st_size
    if getattr(folder, "unpacked", None) is not None:
        kept += sum(p.stat().st_size for p in folder.path.rglob("*") if p.is_file())
    return kept


def _plain(message: str, *paths) -> str:
    """``message`` without the server's paths: an unpacked folder's files are named from the folder, an upload by
    its own name."""
    for path in paths:
        if path is not None:
            message = message.replace(str(path) + "/", "").replace(str(path), Path(path).name)
    return message


def open_evaluation(path: str | Path) -> tuple[ResultsView, ExplorerView, Folder | None]:
    """An evaluation folder (or an uploaded .zip of one, or a bare summary.csv): the summary, the explorer. A .zip
    is unpacked into a temporary folder (the returned folder's ``unpacked``; ``ui.sessions.release`` removes it when
    the session lets it go)."""
    path = upload = Path(path)
    unpacked = None
    try:
        if path.suffix.lower() == ".zip":
            path = unpacked = unpack_folder(path)
        if path.is_file():  # a summary.csv alone: the table and charts, no grid
            return show_summary(str(path)), ExplorerView(explorer_box=gr.update(visible=False)), None
        summary = show_summary(str(path))
        folder = open_folder(path)
        folder.unpacked = unpacked
        folder.held_bytes = folder_bytes(folder)
        view = explorer_view(folder)
    except Exception as exc:  # noqa: BLE001 - an upload is anyone's: one sentence, never a traceback or a path
        if unpacked is not None:
            shutil.rmtree(unpacked, ignore_errors=True)
        if isinstance(exc, EnsembleError):
            message = _plain(str(exc), unpacked, upload)
        else:
            logging.getLogger(__name__).warning("evaluation upload refused: %s: %s", type(exc).__name__, str(exc)[:200])
            message = "This upload could not be opened as an evaluation folder (a file in it is damaged or not what `evaluate` writes)."
        return ResultsView(visual.error_html(message)), ExplorerView(explorer_box=gr.update(visible=False)), None
    if unpacked is not None:
        _UNPACKED.add(unpacked)
    return summary, view, folder


_SHIPPED_STATS: dict[Path, dict] = {}


def _stats(folder: Folder) -> dict:
    """:func:`decision_stats` (bounded); a folder of the server's own (not an upload) is read once per process, and
    kept once every trace was counted."""
    if getattr(folder, "unpacked", None) is not None:
        return decision_stats(folder)
    key = folder.path.resolve()
    if key not in _SHIPPED_STATS:
        stats = decision_stats(folder)
        if not stats["counted"]["complete"]:
            return stats
        _SHIPPED_STATS[key] = stats
    return _SHIPPED_STATS[key]


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
        grid=grid_html(folder, folder.question_ids, blame=blaming.blame_marks(folder)),
        cell_note='<p class="el-muted">Click a cell: with traces its answer opens in the Run tab\'s views, else its text shows here.</p>',
        part_qid=gr.update(choices=folder.question_ids, value=folder.question_ids[0] if folder.question_ids else None),
        part_a=gr.update(choices=folder.methods, value=first),
        part_b=gr.update(choices=folder.methods, value=second if second != first else None),
        part_view="",
        stats_view=waiting if folder.has_traces else f'<p class="el-muted">{visual.safe(folder.traces_note)}</p>',
        stats_plot_a=gr.update(visible=False),
        stats_plot_b=gr.update(visible=False),
        stats_plot_c=gr.update(visible=False),
        blame_view="",
        blame_stats="",
        blame_plot=gr.update(visible=False),
    )


def stats_view(folder: Folder | None) -> ExplorerView:
    """The decision statistics (tables and charts) of an opened folder with traces; nothing changes otherwise."""
    if folder is None or not folder.has_traces:
        return ExplorerView()
    stats = _stats(folder)
    figures = [decisions_figure(stats), first_replacement_figure(stats), weights_trajectories_figure(stats)]
    table, chart = blaming.stats(folder)
    return ExplorerView(
        blame_stats=table,
        blame_plot=gr.update(value=chart, visible=chart is not None),
        stats_view=stats_html(stats),
        stats_plot_a=gr.update(value=figures[0], visible=figures[0] is not None),
        stats_plot_b=gr.update(value=figures[1], visible=figures[1] is not None),
        stats_plot_c=gr.update(value=figures[2], visible=figures[2] is not None),
    )


def filtered_grid(folder: Folder | None, kind: str, ensemble: str | None, order: str) -> str:
    if folder is None:
        return '<p class="el-muted">Open an evaluation folder first.</p>'
    try:
        return grid_html(folder, filter_questions(folder, kind or "all", ensemble, order or "qid"), blame=blaming.blame_marks(folder))
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
    return trace, (f'<p>Question {qid}, <b>{visual.safe(method)}</b> ({visual.safe(cell_words(folder, qid, method))}): opened '
                   "in the <b>Run</b> tab (strip, inspector, tokenizer rows, SpecEM rounds). No model was loaded.</p>")


def cell_words(folder: Folder, qid: int, method: str) -> str:
    """What a cell is, in words: "answered 4, gold 1110: wrong"."""
    row = folder.row(qid, method) or {}
    return f"answered {row.get('prediction')}, gold {row.get('gold')}: {'right' if row.get('correct') else 'wrong'}"


def parting_view(folder: Folder | None, qid, a, b) -> str:
    if folder is None:
        return '<p class="el-muted">Open an evaluation folder first.</p>'
    try:
        div = answers_divergence(folder, int(qid) if qid is not None else -1, (str(a or ""), str(b or "")))
    except (EnsembleError, ValueError) as exc:
        return visual.error_html(str(exc))
    q = div.qid if hasattr(div, "qid") else int(qid)
    who = "; ".join(f"{visual.safe(label)} {visual.safe(cell_words(folder, q, label))}" for label in div.labels)
    return f'<p class="el-cell-identity"><b>Question {q}</b>: {who}.</p>' + divergence_html(div)


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
    from ensemble.evaluation.divergence import divergence
    from ensemble.trace.read import read_trace

    try:  # each trace through the reader's time limit; the word diff is capped (ensemble.fork.MAX_DIFF_PAIRS)
        a, b = (read_trace(t) for t in (trace_a, trace_b))
    except EnsembleError as exc:
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
        if isinstance(qid, str) and qid.strip().isdigit() and len(qid.strip()) < 12:
            qid = int(qid.strip())  # a question number sent as text, as JSON clients do
        elif isinstance(qid, float) and qid.is_integer():
            qid = int(qid)
        return answers_divergence(folder, qid, pair).to_dict()
    except EnsembleError as exc:
        raise gr.Error(str(exc)) from exc
