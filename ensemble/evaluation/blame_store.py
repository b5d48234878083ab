"""Attributions kept in the evaluation folder, so the app and ``report`` show them without models.

``blame.jsonl``: one :class:`~.blame.Blame` record a line, appended as each answer's search ends (a cut run loses
at most the answer in progress, and a rerun skips the answers already there: resumable like ``evaluate``);
``blame/<method>/<qid>-<token>.json.gz``: the decisive fork's trace (the Results tab opens it in the fork view).
:func:`run_batch` fills both for every question where two methods differ in correctness; :func:`blame_table` counts
them for the dataset table.
"""

from __future__ import annotations

import gzip
import json
import os
import zlib
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from ..errors import EvaluationError, TraceFormatError
from ..files import file_lock
from ..trace import MAX_TRACE_BYTES, RunTrace
from ..trace.read import read_trace
from .blame import DEFAULT_MAX_FORKS, KINDS, Blame, ForkFn, prepare, search
from .explorer import Folder
from .store import append_row, read_file
from .traces import method_folder

BLAME_FILE = "blame.jsonl"
FORKS = "blame"
MAX_BLAME_BYTES = 64 * 1024 * 1024


def read_blame(out: str | os.PathLike) -> dict[tuple[int, str, str], Blame]:
    """The folder's attributions by (question, method, reference); a broken line (a cut write) is skipped."""
    path = Path(out) / BLAME_FILE
    if not path.exists():
        return {}
    found = {}
    for line in read_file(path, MAX_BLAME_BYTES).split(b"\n"):
        try:
            data = json.loads(line.decode("utf-8")) if line.strip() else None
            blame = Blame.from_dict(data) if isinstance(data, dict) else None
        except (ValueError, TypeError, RecursionError):
            blame = None
        if blame is not None and isinstance(blame.qid, int):
            found[(blame.qid, str(blame.method), str(blame.reference))] = blame
    return found


def fork_path(out: str | os.PathLike, qid: int, method: str, index: int) -> Path:
    return Path(out) / FORKS / method_folder(method) / f"{int(qid)}-{int(index)}.json.gz"


def save_fork(out: str | os.PathLike, qid: int, method: str, index: int, trace: RunTrace) -> None:
    path = fork_path(out, qid, method, index)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=9, mtime=0) as fh:
        fh.write(trace.to_json().encode("utf-8"))
    os.replace(tmp, path)


def load_fork(out: str | os.PathLike, qid: int, method: str, index: int) -> RunTrace | None:
    """The decisive fork's trace, or None when the folder has none (a damaged file counts as none)."""
    path = fork_path(out, qid, method, index)
    if not path.is_file():
        return None
    try:
        with gzip.open(path, "rb") as fh:
            data = fh.read(MAX_TRACE_BYTES + 1)
        return read_trace(data) if len(data) <= MAX_TRACE_BYTES else None
    except (OSError, EOFError, zlib.error, TraceFormatError):
        return None


def record(out: str | os.PathLike, blame: Blame, forked: RunTrace | None = None) -> None:
    """Append one attribution to ``blame.jsonl`` (and its decisive fork's trace, when given)."""
    if forked is not None and blame.decisive is not None:
        save_fork(out, blame.qid, blame.method, blame.decisive, forked)
    with open(Path(out) / BLAME_FILE, "a", encoding="utf-8") as fh:
        append_row(fh, blame.to_dict())


def targets(folder: Folder, method: str, reference: str) -> list[int]:
    """The questions where ``method`` and ``reference`` differ in correctness (both answered, ``method`` traced)."""
    found = []
    for q in folder.question_ids:
        a, b = folder.row(q, method), folder.row(q, reference)
        if a is not None and b is not None and bool(a.get("correct")) != bool(b.get("correct")) and (q, method) in folder.traced:
            found.append(q)
    return found


def run_batch(folder: Folder, methods: list[str], reference: str | None, fork: ForkFn,
              max_forks: int = DEFAULT_MAX_FORKS, say: Callable[[str], None] = print) -> list[Blame]:
    """Attribute every question where each of ``methods`` and ``reference`` differ, appending to ``blame.jsonl``.

    Answers already recorded for the same (question, method, reference) are skipped: rerunning the command
    continues a cut run; a rerun with a larger ``max_forks`` continues the searches that ran out of forks. One batch at a time per method and folder (a lock)."""
    out = folder.path
    made = []
    for method in methods:
        try:
            lock = file_lock(out / f".blame-{method_folder(method)}.lock", wait=False)
            lock.__enter__()
        except BlockingIOError:
            raise EvaluationError(f"Another blame batch is attributing {method} in this folder right now; wait for it to end.") from None
        try:
            done = read_blame(out)
            first, _ = prepare_labels(folder, method, reference)
            todo = targets(folder, first[0], first[1])
            say(f"{first[0]} against {first[1]}: {len(todo)} questions differ in correctness")
            for n, qid in enumerate(todo, 1):
                old = done.get((qid, first[0], first[1]))
                if old is not None and not (old.status == "budget" and len(old.tried) < max_forks):
                    say(f"  [{n}/{len(todo)}] question {qid}: already attributed")
                    continue
                blame, trace = prepare(folder, qid, first[0], first[1])
                if old is not None:  # a larger --max-forks continues the recorded search (the newest line wins)
                    blame.tried, blame.cost = old.tried, old.cost
                search(blame, trace, fork, max_forks,
                       progress=lambda i, k, e, q=qid: say(f"    question {q}: decision {i}/{k} (token #{e['index']}, "
                                                             f"{e['kind']}) -> {e['prediction']}{' FLIPS' if e['flipped'] else ''}"),
                       keep=lambda index, forked, q=qid, m=first[0]: save_fork(out, q, m, index, forked))
                record(out, blame)
                made.append(blame)
                say(f"  [{n}/{len(todo)}] {blame.summary()}")
        finally:
            lock.__exit__(None, None, None)
    return made


def prepare_labels(folder: Folder, method: str, reference: str | None) -> tuple[tuple[str, str], None]:
    """(method, reference) resolved as :func:`~.blame.prepare` resolves them (the reference: the drafter alone)."""
    from .blame import _labels

    first = _labels(folder, method, reference)
    trace = next((folder.readable_trace(q, first[0]) for q in folder.question_ids if (q, first[0]) in folder.traced), None)
    return _labels(folder, method, reference, trace), None


def _count(folder: Folder, method: str, reference: str, outcome: str, default: int) -> int:
    """How many questions ``method`` lost (or won) against ``reference`` in the folder."""
    if method not in folder.methods or reference not in folder.methods:
        return default
    return sum(1 for q in targets(folder, method, reference) if bool((folder.row(q, method) or {}).get("correct")) == (outcome == "won"))


def blame_table(folder: Folder, records: dict | None = None) -> list[dict]:
    """The dataset table: per (method, reference, outcome): answers, searched, with a decisive decision, by kind,
    by member, mean position and the positions."""
    records = read_blame(folder.path) if records is None else records
    groups: dict[tuple[str, str, str], list[Blame]] = {}
    for b in records.values():
        groups.setdefault((b.method, b.reference, b.outcome), []).append(b)
    rank = {m: i for i, m in enumerate(folder.methods)}
    rows = []
    for (method, reference, outcome), blames in sorted(groups.items(), key=lambda kv: (rank.get(kv[0][0], 99), kv[0][2])):
        decisive = [b.decisive_entry() for b in blames if b.decisive_entry() is not None]
        positions = sorted(d["index"] for d in decisive)
        rows.append({
            "method": method, "reference": reference, "outcome": outcome,
            "answers": _count(folder, method, reference, outcome, len(blames)),
            "searched": len(blames), "decisive": len(decisive),
            "none": sum(1 for b in blames if b.status in ("none", "no-decisions")),
            "budget": sum(1 for b in blames if b.status == "budget"),
            "kinds": {KINDS[k]: n for k, n in Counter(d["kind"] for d in decisive).most_common()},
            "members": dict(Counter(d["carried_by"] or "fused vote" for d in decisive).most_common()),
            "positions": positions,
            "median_position": positions[len(positions) // 2] if positions else None,
            "questions": {str(b.qid): (b.decisive_entry() or {}).get("index") for b in sorted(blames, key=lambda b: b.qid)},
            "forks": sum(b.cost.get("forks", 0) for b in blames), "seconds": round(sum(b.cost.get("seconds", 0.0) for b in blames)),
        })
    return rows
