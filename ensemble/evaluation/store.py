"""An evaluation folder on disk: ``rows.jsonl`` (appended row by row, repaired after a cut), ``meta.json``
(checked before a resume), ``rows.csv``, and the lock that keeps two writers out of one folder."""

from __future__ import annotations

import contextlib
import csv
import json
import os
import stat
from collections.abc import Iterable, Mapping
from pathlib import Path

from ..errors import EvaluationError
from ..files import atomic_output, file_lock, write_output
from .scoring import LATER_ROW_FIELDS, ROW_FIELDS, looping

MAX_META_BYTES = 16 * 1024 * 1024
MAX_ROWS_BYTES = 512 * 1024 * 1024
"""What the readers of a folder (the CLI, the Results tab) read of its ``meta.json`` and ``rows.jsonl`` at most: a
meta.json holds the settings and the question numbers (80 KB for 1,319 questions); rows.jsonl about 2 KB a row."""


def read_file(path: Path, limit: int) -> bytes:
    """A folder's file, read only when it is a regular file (not a device such as /dev/zero, a pipe that would
    wait for a writer forever, nor a folder) and at most ``limit`` bytes long. Messages name the file, not its path."""
    try:
        info = os.stat(path)
    except OSError as exc:
        raise EvaluationError(f"{path.name} cannot be read ({exc.strerror or exc}).") from None
    if not stat.S_ISREG(info.st_mode):
        raise EvaluationError(f"{path.name} is not a regular file (a device, a pipe or a folder), so it is not read.")
    try:
        with open(path, "rb") as fh:
            data = fh.read(limit + 1)
    except OSError as exc:
        raise EvaluationError(f"{path.name} cannot be read ({exc.strerror or exc}).") from None
    if len(data) > limit:
        raise EvaluationError(f"{path.name} is larger than {_size(limit)}, more than an evaluation writes; it is not read.")
    return data


def _size(limit: int) -> str:
    return f"{limit / (1024 * 1024):g} MB" if limit >= 1024 * 1024 else f"{limit:,} bytes"


def read_meta(path: Path) -> dict:
    """An evaluation's ``meta.json`` (:func:`read_file`'s limits): a JSON object, else one plain sentence."""
    try:
        meta = json.loads(read_file(path, MAX_META_BYTES).decode("utf-8"))
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError; RecursionError: "[" x 100,000
        raise EvaluationError(f"{path.name} is not an evaluation meta.json (it is not readable JSON).") from exc
    if not isinstance(meta, dict):
        raise EvaluationError(f"{path.name} is not an evaluation meta.json (it holds no JSON object).")
    return meta


def _describe_change(key: str, old, new) -> str:
    if key == "settings" and isinstance(old, dict) and isinstance(new, dict):
        changed = [f"{k} was {old.get(k)!r}, now {new.get(k)!r}" for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)]
        return "settings: " + "; ".join(changed)
    if key == "data_sha256":
        return "the --data file has different contents"
    if key == "instruction":
        return "the instruction appended to questions changed"
    return f"{key} was {old!r}, now {new!r}"


def check_compatible(out: str | os.PathLike, fingerprint: dict, model_info: Mapping[str, dict] | None = None) -> dict | None:
    """Refuse to resume into ``out`` when its meta.json was made with other settings; return that meta (or None)."""
    out = Path(out)
    meta_path, rows_path = out / "meta.json", out / "rows.jsonl"
    if not meta_path.exists():
        if rows_path.exists() and rows_path.stat().st_size > 0:
            raise EvaluationError(
                f"{out} holds rows.jsonl but no meta.json, so its settings are unknown: choose another --out folder."
            )
        return None
    meta = read_meta(meta_path)
    try:
        old = meta["fingerprint"]
        if not isinstance(old, dict):
            raise TypeError
    except (ValueError, KeyError, TypeError) as exc:
        raise EvaluationError(f"{meta_path} is not an evaluation meta.json; choose another --out folder.") from exc
    problems = [_describe_change(k, old.get(k), v) for k, v in fingerprint.items() if old.get(k) != v]
    for name, info in (model_info or {}).items():
        before = (meta.get("model_info") or {}).get(name)
        if before is not None:
            for k in ("architecture", "parameters", "dtype", "vocab"):
                if before.get(k) != info.get(k):
                    problems.append(f"model {name}: {k} was {before.get(k)!r}, now {info.get(k)!r}")
    if problems:
        raise EvaluationError(
            f"{out} already holds results made differently, and mixing them would make them incomparable: "
            + "; ".join(problems)
            + f". Use a new --out folder, or rerun with the settings recorded in {meta_path}."
        )
    return meta


def read_rows(path: str | os.PathLike, repair: bool = False) -> list[dict]:
    """The rows of ``rows.jsonl``. A broken last line (a run interrupted while writing) is ignored, and with
    ``repair`` cut from the file so that new rows append cleanly; a broken line elsewhere is an error."""
    path = Path(path)
    if not path.exists():
        return []
    data = read_file(path, MAX_ROWS_BYTES)
    lines = data.split(b"\n")
    last_row = max((i for i, line in enumerate(lines) if line.strip()), default=-1)
    rows: list[dict] = []
    offset = keep = 0
    for i, line in enumerate(lines):
        end = offset + len(line) + (1 if i < len(lines) - 1 else 0)
        if line.strip():
            row = _parse_row(line)
            if row is None:
                if i == last_row:
                    break
                raise EvaluationError(f"{path.name} line {i + 1} is not a valid result row; delete that line (its run is redone).")
            rows.append(row)
            keep = end
        offset = end
    if repair:
        if keep < len(data):
            with open(path, "r+b") as fh:
                fh.truncate(keep)
        if keep > 0 and not data[:keep].endswith(b"\n"):
            with open(path, "ab") as fh:  # a complete last row that lost only its newline
                fh.write(b"\n")
    return rows


def _parse_row(line: bytes) -> dict | None:
    try:
        row = json.loads(line.decode("utf-8"))
    except (ValueError, RecursionError):  # RecursionError: a line of "[" x 100,000
        return None
    if not isinstance(row, dict) or not isinstance(row.get("qid"), int) or not isinstance(row.get("method"), str):
        return None
    if any(k not in row for k in ROW_FIELDS if k not in LATER_ROW_FIELDS):
        return None
    row["looping"] = looping(row)  # rows written before the flag existed get it from their text
    return row


def append_row(fh, row: dict) -> None:
    fh.write(json.dumps(row, ensure_ascii=False) + "\n")
    fh.flush()
    os.fsync(fh.fileno())


def sort_rows(rows: list[dict], methods: list[str]) -> list[dict]:
    rank = {m: i for i, m in enumerate(methods)}
    return sorted(rows, key=lambda r: (r["qid"], rank.get(r["method"], len(rank)), r["method"]))


def write_rows_csv(path: str | os.PathLike, rows: list[dict]) -> None:
    with atomic_output(path, newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=ROW_FIELDS, extrasaction="ignore")
        writer.writeheader()
        for row in rows:
            writer.writerow({k: _csv_cell(row.get(k)) for k in ROW_FIELDS})


def _csv_cell(value):
    if value is None:
        return ""
    return json.dumps(value, ensure_ascii=False) if isinstance(value, dict) else value


def unique_rows(rows: Iterable[dict]) -> tuple[list[dict], set[tuple[int, str]]]:
    """The rows with each (question, method) once, first one kept (files joined by hand may repeat rows)."""
    kept, done = [], set()
    for row in rows:
        if (row["qid"], row["method"]) not in done:
            done.add((row["qid"], row["method"]))
            kept.append(row)
    return kept, done


@contextlib.contextmanager
def folder_lock(out: Path):
    """One evaluation at a time per folder: two writers would run the same questions twice."""
    with contextlib.ExitStack() as stack:
        try:
            stack.enter_context(file_lock(out / ".lock", wait=False))
        except BlockingIOError:
            raise EvaluationError(f"Another evaluation is writing into {out} right now; wait for it or use another --out folder.") from None
        yield


def write_json(path: Path, data: dict) -> None:
    write_output(path, json.dumps(data, ensure_ascii=False, indent=1))
