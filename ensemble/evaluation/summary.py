"""From result rows to one summary row per method (accuracy with a Wilson interval, speed, E/T, flag rates),
and ``summary.csv`` read back."""

from __future__ import annotations

import csv
import io
import math
import os
from collections.abc import Iterable
from pathlib import Path

from ..errors import EvaluationError
from .scoring import looping

SUMMARY_FIELDS = ["method", "n", "correct", "accuracy", "ci_low", "ci_high", "mean_et", "tokens_per_s",
                  "s_per_question", "corruption_rate", "mean_tokens", "loop_rate", "budget_rate",
                  "replaced_per_100", "discarded_per_100"]
OPTIONAL_SUMMARY_FIELDS = ("loop_rate", "budget_rate", "replaced_per_100", "discarded_per_100")
"""Added after the first summaries were written: a summary.csv without them still opens (shown as "–")."""
_INT_FIELDS = ("n", "correct")
MAX_SUMMARY_BYTES = 5 * 1024 * 1024
Z_95 = 1.959963984540054


def wilson_interval(correct: int, n: int, z: float = Z_95) -> tuple[float, float]:
    """The Wilson score interval of a proportion (95% by default); (0, 1) when n is 0."""
    if n <= 0:
        return 0.0, 1.0
    p = correct / n
    denom = 1 + z * z / n
    center = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, center - half), min(1.0, center + half)


def summarize(rows: Iterable[dict], methods: list[str] | None = None) -> list[dict]:
    """One summary row per method (in ``methods`` order, else first-seen order); methods without rows are left out.

    tokens_per_s is total tokens / total latency (not a mean of per-question rates); s_per_question is
    total latency / n.
    """
    groups: dict[str, list[dict]] = {}
    for row in rows:
        groups.setdefault(row["method"], []).append(row)
    order = methods if methods is not None else list(groups)
    out = []
    for label in order:
        group = groups.get(label)
        if not group:
            continue
        n = len(group)
        correct = sum(1 for r in group if r["correct"])
        tokens = sum(r["tokens"] for r in group)
        latency = sum(r["latency_s"] for r in group)
        low, high = wilson_interval(correct, n)
        out.append(
            {
                "method": label,
                "n": n,
                "correct": correct,
                "accuracy": round(correct / n, 6),
                "ci_low": round(low, 6),
                "ci_high": round(high, 6),
                "mean_et": round(sum(r["et_ratio"] for r in group) / n, 6),
                "tokens_per_s": round(tokens / latency, 4) if latency > 0 else 0.0,
                "s_per_question": round(latency / n, 4),
                "corruption_rate": round(sum(1 for r in group if r["corrupted"]) / n, 6),
                "mean_tokens": round(tokens / n, 4),
                "loop_rate": round(sum(1 for r in group if looping(r)) / n, 6),
                "budget_rate": round(sum(1 for r in group if r.get("stop_reason") == "budget") / n, 6),
                # SAFE's drafting: replaced draft tokens and discarded draft tokens per 100 generated tokens
                # (rows written before these fields existed count as 0).
                "replaced_per_100": round(100 * sum(r.get("replaced") or 0 for r in group) / tokens, 4) if tokens else 0.0,
                "discarded_per_100": round(100 * sum(r.get("discarded") or 0 for r in group) / tokens, 4) if tokens else 0.0,
            }
        )
    return out


def load_summary(path_or_dir: str | os.PathLike) -> list[dict]:
    """Read an evaluation's ``summary.csv`` (or the folder holding it) back as a list of typed dicts."""
    path = Path(path_or_dir)
    if path.is_dir():
        path = path / "summary.csv"
    if not path.exists():
        raise EvaluationError(f"No evaluation summary at {str(path)!r}: run `python -m ensemble evaluate ... --out DIR` first.")
    if not path.is_file():  # a pipe would wait for a writer forever, a device never ends
        raise EvaluationError(f"{path.name} is not a regular file, so it is not read as an evaluation summary.")
    if path.stat().st_size > MAX_SUMMARY_BYTES:
        raise EvaluationError(f"{path} is larger than 5 MB; an evaluation summary has one short line per method.")
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise EvaluationError(f"{path} is not UTF-8 text, so it is not an evaluation summary.") from exc
    try:
        table = list(csv.reader(io.StringIO(text, newline="")))
    except csv.Error as exc:
        raise EvaluationError(f"{path} is not a readable CSV file: {exc}.") from exc
    header = [c.strip() for c in table[0]] if table else []
    missing = [c for c in SUMMARY_FIELDS if c not in header and c not in OPTIONAL_SUMMARY_FIELDS]
    if missing:
        raise EvaluationError(f"{path} is not an evaluation summary: missing column(s) {', '.join(missing)}.")
    out = []
    for line, cells in enumerate(table[1:], start=2):
        if not any(c.strip() for c in cells):
            continue
        if len(cells) != len(header):
            raise EvaluationError(f"{path} line {line} has {len(cells)} fields where the header has {len(header)}.")
        raw = dict(zip(header, cells))
        row: dict = {"method": raw["method"].strip()}
        if not row["method"]:
            raise EvaluationError(f"{path} line {line}: the method is empty.")
        for col in SUMMARY_FIELDS[1:]:
            if col not in raw:
                continue  # an optional column of an older summary
            value = raw[col].strip()
            try:
                number = int(value) if col in _INT_FIELDS else float(value)
            except ValueError:
                kind = "a whole number" if col in _INT_FIELDS else "a number"
                raise EvaluationError(f"{path} line {line}: {col} must be {kind}, not {value[:40]!r}.") from None
            if (isinstance(number, float) and not math.isfinite(number)) or number < 0:
                raise EvaluationError(f"{path} line {line}: {col} must be a finite number of at least 0, not {value[:40]!r}.")
            row[col] = number
        if row["correct"] > row["n"]:
            raise EvaluationError(f"{path} line {line}: correct ({row['correct']}) is larger than n ({row['n']}).")
        out.append(row)
    return out


def segment_summary(rows: Iterable[dict]) -> dict[str, dict]:
    """Per segment method (rows with ``final_weights``): questions, segments won per model (summed) and each
    model's Hedge weight after the last round (mean over questions)."""
    out: dict[str, dict] = {}
    for row in rows:
        weights, wins = row.get("final_weights"), row.get("segment_wins")
        if not isinstance(weights, dict) or not weights:
            continue
        entry = out.setdefault(row["method"], {"questions": 0, "wins": {}, "weight_sum": {}})
        entry["questions"] += 1
        for name, w in weights.items():
            entry["weight_sum"][name] = entry["weight_sum"].get(name, 0.0) + float(w)
            entry["wins"][name] = entry["wins"].get(name, 0) + int((wins or {}).get(name, 0))
    for entry in out.values():
        entry["mean_final_weight"] = {n: round(w / entry["questions"], 4) for n, w in entry.pop("weight_sum").items()}
    return out


def paired_questions(rows: Iterable[dict], question_ids: Iterable[int], labels: list[str]) -> list[int]:
    """The selected questions that every method with results has finished, in selection order.

    An interrupted run (or one split across processes by method) has methods at different points; comparing
    them on different questions would mix question difficulty into the method differences, so the summary
    covers only these shared questions until the run is complete.
    """
    done: dict[str, set[int]] = {}
    for r in rows:
        if r["method"] in labels:
            done.setdefault(r["method"], set()).add(r["qid"])
    if not done:
        return []
    shared = set.intersection(*done.values())
    return [q for q in question_ids if q in shared]
