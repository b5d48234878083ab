"""An evaluation folder on disk: ``rows.jsonl`` (appended row by row, repaired after a cut), ``meta.json``
(checked before a resume), ``rows.csv``, and the lock that keeps two writers out of one folder."""

from __future__ import annotations

import contextlib
import csv
import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path

from ..errors import EvaluationError
from ..files import atomic_output, file_lock, write_output
from .scoring import LATER_ROW_FIELDS, ROW_FIELDS, looping


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
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
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
    data = path.read_bytes()
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
                raise EvaluationError(f"{path} line {i + 1} is not a valid result row; delete that line (its run is redone).")
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
    except (ValueError, UnicodeDecodeError):
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
