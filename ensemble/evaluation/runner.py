"""Running an evaluation: every method on every selected question, one row appended as each finishes, resumable."""

from __future__ import annotations

import datetime as _dt
import os
import platform
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from ..capabilities import is_one_model
from ..errors import Cancelled, EnsembleError, EvaluationError
from ..files import file_sha256
from .data import INSTRUCTION, build_prompt, load_questions, select_questions
from .report import write_summary
from .scoring import make_row
from .specs import EvalConfig
from .store import (
    append_row,
    check_compatible,
    folder_lock,
    read_meta,
    read_rows,
    sort_rows,
    unique_rows,
    write_json,
    write_rows_csv,
)
from .summary import paired_questions, summarize
from .traces import save_trace

HtmlWriter = Callable[[Path, list[dict], dict], object]
"""Writes ``report.html`` from a folder's summary and meta (the command line's, which draws with ``visual``)."""


class _StopsDeferred:
    """Ctrl-C or ``kill`` arriving while a finished row is written and counted waits until both are done, so
    ``meta.json``'s ``new_rows`` always equals the rows the file gained (a Stop mid-``fsync`` used to leave the
    row in the file but uncounted). Off the main thread signals are not ours to touch and this does nothing."""

    _SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __enter__(self):
        self._pending = None
        self._previous = {}
        if threading.current_thread() is not threading.main_thread():
            return self
        for sig in self._SIGNALS:
            self._previous[sig] = signal.signal(sig, self._hold)
        return self

    def _hold(self, signum, frame):
        self._pending = signum

    def __exit__(self, *exc):
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        if self._pending is not None and exc[0] is None:
            signal.raise_signal(self._pending)  # delivered again, now to the handler that was in place
        return False


def _now() -> str:
    return _dt.datetime.now(_dt.UTC).astimezone().isoformat(timespec="seconds")


def machine_info() -> dict:
    import torch

    info = {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
    }
    try:
        from importlib.metadata import version

        info["transformers"] = version("transformers")
    except Exception:  # noqa: BLE001 - version lookup is best effort
        info["transformers"] = None
    return info


def _model_info(model) -> dict:
    info = getattr(model, "info", {}) or {}
    return {k: info.get(k) for k in ("architecture", "parameters", "dtype", "vocab", "runtime")} | {"source": getattr(model, "source", None)}


def _as_model_map(models) -> dict:
    if isinstance(models, Mapping):
        return dict(models)
    return {m.name: m for m in models}


def run_evaluation(
    config: EvalConfig, models, progress: bool = True, write_html: HtmlWriter | None = None, backend=None
) -> list[dict]:
    """Evaluate every method on the selected questions, resuming what ``config.out`` already holds.

    Args:
        config: what to run (validated here).
        models: the loaded models, as a name -> LoadedModel mapping or a list (keyed by ``.name``); it must
            hold every model of ``config.models`` and every ``single:NAME``.
        progress: show a tqdm progress bar with ETA on stderr.
        write_html: called with (folder, summary, meta) once a complete or stopped run has written its summary;
            the command line passes the writer of ``report.html`` (:func:`ensemble.cli.report.write_html_report`).
        backend: where the ensemble methods' members compute (:mod:`ensemble.members`); ``single:NAME`` runs
            in process, so it stays the baseline every ratio is taken against.

    Returns:
        The summary rows (also written to ``summary.csv``).
    """
    config.validate()
    loaded = _as_model_map(models)
    missing = [n for n in config.model_names() if n not in loaded]
    if missing:
        raise EvaluationError(f"Model(s) {', '.join(missing)} were not loaded; loaded: {', '.join(loaded) or 'none'}.")
    out = Path(config.out)
    questions_all = load_questions(config.data)
    questions = select_questions(questions_all, config.limit, config.settings.seed)
    data_sha = file_sha256(config.data)
    model_info = {n: _model_info(loaded[n]) for n in config.model_names()}
    out.mkdir(parents=True, exist_ok=True)
    with folder_lock(out):
        summary, meta = _run_locked(config, loaded, out, questions_all, questions, data_sha, model_info, progress, backend)
        if write_html is not None:
            write_html(out, summary, meta)
    return summary


def _run_locked(config, loaded, out, questions_all, questions, data_sha, model_info, progress, backend=None) -> tuple[list[dict], dict]:
    from .. import methods as engine

    old_meta = check_compatible(out, config.fingerprint(data_sha), model_info)

    rows_path = out / "rows.jsonl"
    rows, done = unique_rows(read_rows(rows_path, repair=True))
    labels = [s.label for s in config.methods]
    started = _now()
    meta = _meta(config, old_meta, data_sha, len(questions_all), questions, model_info, started)
    meta["runs"][-1]["backend"] = backend.describe() if backend is not None else "local"  # timings depend on it
    write_json(out / "meta.json", meta)

    todo = [(q, s) for q in questions for s in config.methods if (q.qid, s.label) not in done]
    total = len(questions) * len(config.methods)
    from tqdm import tqdm

    bar = tqdm(total=total, initial=total - len(todo), desc="evaluate", unit="run", file=sys.stderr,
               disable=not progress, dynamic_ncols=True)
    new_rows = 0
    complete = False
    try:
        with open(rows_path, "a", encoding="utf-8") as fh:
            for question, spec in todo:
                bar.set_postfix_str(f"running question {question.qid}, {spec.label}")
                members = [loaded[n] for n in spec.model_names(config.models)]
                t0 = time.perf_counter()
                try:
                    where = None if is_one_model(spec.method) else backend  # the single baseline runs in process
                    trace = engine.generate(members, build_prompt(question.question), spec.method, spec.settings(config.settings), backend=where)
                    row = make_row(question, spec.label, trace)
                    save_trace(out, question.qid, spec.label, trace)  # before the row: a row always has its trace
                except Cancelled:
                    raise
                except EnsembleError as exc:
                    bar.write(f"warning: question {question.qid}, {spec.label}: {exc}", file=sys.stderr)
                    row = make_row(question, spec.label, error=str(exc), latency_s=time.perf_counter() - t0)
                with _StopsDeferred():
                    append_row(fh, row)
                    rows.append(row)
                    new_rows += 1
                bar.update(1)
        complete = True
    finally:
        bar.close()
        meta["runs"][-1].update(finished=_now(), new_rows=new_rows, complete=complete)
        meta["finished"] = meta["runs"][-1]["finished"]
        meta["complete"] = complete
        summary = _write_outputs(out, rows, [q.qid for q in questions], labels, meta)
        if not complete:
            print(f"Stopped after {new_rows} new run(s); rerun the same command to continue ({out}).", file=sys.stderr)
    return summary, meta


def _write_outputs(out: Path, rows: list[dict], question_ids: list[int], labels: list[str], meta: dict) -> list[dict]:
    paired = set(paired_questions(rows, question_ids, labels))
    current = [r for r in rows if r["qid"] in paired and r["method"] in labels]
    meta["summarized_questions"] = len(paired)
    summary = summarize(current, labels)
    write_rows_csv(out / "rows.csv", sort_rows(rows, labels))
    write_summary(out, summary, meta, current)
    write_json(out / "meta.json", meta)
    return summary


def rebuild_report(out: str | os.PathLike, write_html: HtmlWriter | None = None) -> list[dict]:
    """Rewrite rows.csv, summary.csv/.md and report.html of ``out`` from its rows.jsonl and meta.json, running nothing.

    For folders whose rows.jsonl was joined by hand, e.g. one run split across processes by method: each
    process resumes its own copy of the folder with part of ``--methods``, then the rows files are
    concatenated into the folder whose meta.json lists every method (duplicate rows count once).
    """
    out = Path(out)
    meta_path = out / "meta.json"
    if not meta_path.exists():
        raise EvaluationError(f"{out} has no meta.json: it is not an evaluation folder (made by `python -m ensemble evaluate`).")
    meta = read_meta(meta_path)
    try:
        labels, question_ids = list(meta["methods"]), [int(q) for q in meta["question_ids"]]
    except (ValueError, KeyError, TypeError) as exc:
        raise EvaluationError(f"{meta_path} is not an evaluation meta.json.") from exc
    with folder_lock(out):
        rows, done = unique_rows(read_rows(out / "rows.jsonl", repair=True))
        meta["complete"] = all((q, m) in done for q in question_ids for m in labels)
        summary = _write_outputs(out, rows, question_ids, labels, meta)
    if write_html is not None:
        write_html(out, summary, meta)
    return summary


def _meta(config, old_meta, data_sha, total_questions, questions, model_info, started) -> dict:
    runs = list((old_meta or {}).get("runs", []))
    runs.append({"command": config.command, "started": started, "finished": None, "new_rows": 0, "complete": False,
                 "limit": config.limit, "methods": [s.label for s in config.methods]})
    old_info = dict((old_meta or {}).get("model_info") or {})
    return {
        "tool": "ensemble-lens evaluate",
        "command": config.command,
        "arguments": config.arguments,
        "data": {"path": str(config.data), "sha256": data_sha, "questions": total_questions},
        "limit": config.limit,
        "seed": config.settings.seed,
        "selected": len(questions),
        "question_ids": [q.qid for q in questions],
        "methods": [s.label for s in config.methods],
        "method_settings": {
            s.label: {"method": s.method, "models": s.model_names(config.models), "settings": s.settings(config.settings).to_dict()}
            for s in config.methods
        },
        "models": list(config.models),
        "model_info": old_info | model_info,
        "settings": config.settings.to_dict(),
        "instruction": INSTRUCTION,
        "device": config.device,
        "dtype": config.dtype,
        "machine": machine_info(),
        "created": (old_meta or {}).get("created") or started,
        "started": started,
        "finished": None,
        "complete": False,
        "runs": runs,
        "fingerprint": config.fingerprint(data_sha),
    }
