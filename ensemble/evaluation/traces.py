"""Every answer's full trace, kept beside its row: ``traces/<method>/<qid>.json.gz`` in the evaluation folder.

One gzip file per answer, written (to a temporary name, then renamed) before the answer's row is appended, so a
row always has its trace and a cut run leaves no half file: a resumed run keeps the traces it finds and adds the
new ones. The method's folder is its label quoted for a file name (``single:qwen`` -> ``single%3Aqwen``), so every
label has its own folder and the label is read back from it. Folders written before traces were kept have no
``traces/`` folder: :func:`has_traces` says so and :func:`load_trace` returns None.

A trace file is read as untrusted input (a folder may come from anyone): at most ``MAX_TRACE_BYTES`` once
unpacked, then :func:`ensemble.trace.read.read_trace` (:meth:`RunTrace.from_json`'s checks within a time limit).
"""

from __future__ import annotations

import gzip
import os
import zlib
from pathlib import Path
from urllib.parse import quote, unquote

from ..errors import EvaluationError, TraceFormatError
from ..trace import MAX_TRACE_BYTES, RunTrace
from ..trace.read import read_trace

TRACES = "traces"
NO_TRACES = "No traces kept for this run (it was written before `evaluate` kept them): only the answers' text is shown."


def method_folder(label: str) -> str:
    """The folder name of a method label: the label quoted for any file system (``:``, ``@``, ``=``, ``+``, ``/``)."""
    return quote(label, safe="-_.") or "%20"


def trace_path(out: str | os.PathLike, qid: int, label: str) -> Path:
    return Path(out) / TRACES / method_folder(label) / f"{int(qid)}.json.gz"


def save_trace(out: str | os.PathLike, qid: int, label: str, trace: RunTrace) -> Path:
    """Write one answer's trace (gzip JSON; atomic: a temporary file renamed into place)."""
    path = trace_path(out, qid, label)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=9, mtime=0) as fh:
        fh.write(trace.to_json().encode("utf-8"))
    os.replace(tmp, path)
    return path


def has_traces(out: str | os.PathLike) -> bool:
    """Whether the folder keeps traces (any answer's trace file)."""
    root = Path(out) / TRACES
    return root.is_dir() and any(root.glob("*/*.json.gz"))


def traced(out: str | os.PathLike) -> set[tuple[int, str]]:
    """The (question, method) pairs that have a trace file."""
    root, found = Path(out) / TRACES, set()
    if not root.is_dir():
        return found
    for path in root.glob("*/*.json.gz"):
        stem = path.name[: -len(".json.gz")]
        if stem.isdigit():
            found.add((int(stem), unquote(path.parent.name)))
    return found


def load_trace(out: str | os.PathLike, qid: int, label: str) -> RunTrace | None:
    """The trace of one answer, or None when the folder kept none for it; a damaged file is an error."""
    path = trace_path(out, qid, label)
    if not path.exists():
        return None
    if not path.is_file():  # a pipe would wait for a writer forever, a device never ends
        raise EvaluationError(f"The trace of question {qid}, {label} ({path.name}) is not a regular file; it is not read.")
    try:
        with gzip.open(path, "rb") as fh:
            data = fh.read(MAX_TRACE_BYTES + 1)
    except (OSError, EOFError, zlib.error) as exc:  # zlib.error: a damaged deflate stream inside the gzip
        raise EvaluationError(f"The trace of question {qid}, {label} ({path.name}) is not a readable gzip file: {exc}.") from exc
    if len(data) > MAX_TRACE_BYTES:
        raise EvaluationError(f"The trace of question {qid}, {label} unpacks to more than 20 MB; it is not loaded.")
    try:
        return read_trace(data)  # the reader's time limit (ENSEMBLE_LENS_TRACE_READ_S): a folder may come from anyone
    except TraceFormatError as exc:
        raise EvaluationError(f"The trace of question {qid}, {label}: {exc}") from exc


def traces_size(out: str | os.PathLike) -> tuple[int, int]:
    """(number of trace files, their bytes on disk)."""
    files = list((Path(out) / TRACES).glob("*/*.json.gz"))
    return len(files), sum(p.stat().st_size for p in files)
