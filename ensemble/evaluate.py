"""``python -m ensemble evaluate``: accuracy, speed and E/T of methods on GSM8K-style questions.

One run evaluates a deterministic subset of the questions (chosen by ``--seed``) with every method, the
methods of one question back to back, and appends one row per (question, method) to ``rows.jsonl`` as soon
as it finishes. Re-running the same command resumes: rows already there are skipped, and a command whose
settings would mix incomparable results into the folder is refused (``meta.json`` holds what was used).

Python API (no model loading by name needed)::

    config = EvalConfig(data="q.jsonl", methods=parse_methods("single:qwen,safe-unite"),
                        models=["qwen", "gemma3"], out="runs/a", settings=Settings(max_new_tokens=256))
    summary = run_evaluation(config, {"qwen": qwen, "gemma3": gemma3})   # LoadedModel objects
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import datetime as _dt
import fcntl
import hashlib
import io
import json
import math
import os
import platform
import random
import re
import shlex
import signal
import sys
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from .answers import extract_answer, gold_answer, same_number
from .errors import Cancelled, EnsembleError
from .settings import Settings

INSTRUCTION = "Solve it step by step, then finish with 'The answer is N.' where N is the final number."
"""Appended to every question (after a newline) so that models end with an answer we can extract."""

ENSEMBLE_SPECS = {"unite": ("unite", None), "gac": ("gac", None), "safe-unite": ("safe", "unite"),
                  "safe-gac": ("safe", "gac"), "specem": ("specem", None)}
SPEC_HELP = "single:NAME, " + ", ".join(ENSEMBLE_SPECS) + " (an ensemble method may name its members: safe-unite@qwen=2+gemma3)"

ROW_FIELDS = ["qid", "method", "prediction", "gold", "correct", "tokens", "et_ratio", "latency_s", "tokens_per_s",
              "stop_reason", "corrupted", "looping", "error", "question", "text", "segment_wins", "final_weights",
              "replaced", "discarded"]
_LATER_ROW_FIELDS = ("looping", "segment_wins", "final_weights", "replaced", "discarded")
"""Row fields added after the first runs; older rows without them stay valid."""
SUMMARY_FIELDS = ["method", "n", "correct", "accuracy", "ci_low", "ci_high", "mean_et", "tokens_per_s",
                  "s_per_question", "corruption_rate", "mean_tokens", "loop_rate", "budget_rate",
                  "replaced_per_100", "discarded_per_100"]
OPTIONAL_SUMMARY_FIELDS = ("loop_rate", "budget_rate", "replaced_per_100", "discarded_per_100")
"""Added after the first summaries were written: a summary.csv without them still opens (shown as "–")."""
_INT_FIELDS = ("n", "correct")
MAX_SUMMARY_BYTES = 5 * 1024 * 1024
Z_95 = 1.959963984540054
_CORRUPT_RUN = re.compile(r"(\S)\1{7,}")
LOOP_WORDS, LOOP_REPEATS = 8, 4


class EvaluationError(EnsembleError):
    """An evaluation that cannot run as asked (bad data file, incompatible resume, malformed summary)."""


# -- methods ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class MethodSpec:
    """One entry of ``--methods``: a label for the results and how to run it.

    Attributes:
        label: as written by the user ("single:qwen", "safe-gac", ...); the ``method`` column of the results.
        method: the engine's method (single | unite | gac | safe | specem).
        model: the model of a ``single:`` spec; None for ensemble methods (they use every ``--models`` entry).
        fusion: SAFE's fusion plug-in set by ``safe-unite`` / ``safe-gac``.
        members: an ensemble method's own models (``safe-unite@qwen+gemma3``), in order (SAFE's drafter is the
            first); None: every ``--models`` entry.
        weights: the members' weights (``safe-unite@qwen=2+gemma3``: qwen 2, gemma3 1); they replace
            ``--weights`` for this method.
    """

    label: str
    method: str
    model: str | None = None
    fusion: str | None = None
    members: tuple[str, ...] | None = None
    weights: tuple[tuple[str, float], ...] = ()

    def model_names(self, ensemble: list[str]) -> list[str]:
        if self.model:
            return [self.model]
        return list(self.members) if self.members else list(ensemble)

    def settings(self, base: Settings) -> Settings:
        """A fresh copy of ``base`` adjusted for this method (a single model ignores ensemble-only options)."""
        out = Settings.from_dict(base.to_dict())
        if self.method == "single":
            out.drafter, out.weights, out.drafters, out.verifiers = None, {}, None, None
        if self.fusion:
            out.fusion = self.fusion
        if self.members:
            out.weights = dict(self.weights)
        return out


def _members(label: str, text: str) -> tuple[tuple[str, ...], tuple[tuple[str, float], ...]]:
    """``qwen=2+gemma3`` -> (("qwen", "gemma3"), (("qwen", 2.0),))."""
    names, weights = [], []
    for part in text.split("+"):
        name, eq, weight = (x.strip() for x in part.partition("="))
        if not name:
            raise EvaluationError(f"{label}: an empty model name after '@'; write e.g. safe-unite@qwen=2+gemma3.")
        names.append(name)
        if eq:
            try:
                weights.append((name, float(weight)))
            except ValueError as exc:
                raise EvaluationError(f"{label}: the weight of {name} must be a number, not {weight!r}.") from exc
    return tuple(names), tuple(weights)


def parse_methods(text: str) -> list[MethodSpec]:
    """Parse a ``--methods`` list such as ``single:qwen,unite,safe-gac,specem``."""
    specs: list[MethodSpec] = []
    for raw in (text or "").split(","):
        item = raw.strip()
        if not item:
            continue
        if item.startswith("single:"):
            name = item.split(":", 1)[1].strip()
            if not name:
                raise EvaluationError("'single:' needs a model name, e.g. single:qwen.")
            spec = MethodSpec(f"single:{name}", "single", model=name)
        elif item.split("@", 1)[0].strip().lower() in ENSEMBLE_SPECS:
            base, at, members = item.partition("@")
            method, fusion = ENSEMBLE_SPECS[base.strip().lower()]
            if at:
                names, weights = _members(item, members)
                spec = MethodSpec(f"{base.strip().lower()}@{members.strip()}", method, fusion=fusion, members=names, weights=weights)
            else:
                spec = MethodSpec(base.strip().lower(), method, fusion=fusion)
        else:
            shown = item if len(item) <= 40 else item[:37] + "..."
            hint = " (a single model is written single:NAME)" if item in ("single", "safe") or ":" not in item else ""
            raise EvaluationError(f"Unknown method {shown!r} in --methods{hint}. Methods: {SPEC_HELP}.")
        if spec.label in (s.label for s in specs):
            raise EvaluationError(f"--methods lists {spec.label!r} twice; list each method once.")
        specs.append(spec)
    if not specs:
        raise EvaluationError(f"--methods is empty: give a comma list of {SPEC_HELP}.")
    return specs


# -- questions ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Question:
    qid: int  # the line index in the data file (0-based)
    question: str
    gold: str


def load_questions(path: str | os.PathLike) -> list[Question]:
    """Read GSM8K-format JSONL (``question``, ``answer`` ending in ``#### number``); blank lines are skipped."""
    path = Path(path)
    if not path.exists():
        raise EvaluationError(f"The --data file {str(path)!r} does not exist.")
    if not path.is_file():
        raise EvaluationError(f"--data must be a JSONL file, but {str(path)!r} is a folder.")
    try:
        lines = path.read_text(encoding="utf-8-sig").split("\n")  # not splitlines(): U+2028 may sit inside a string
    except UnicodeDecodeError as exc:
        raise EvaluationError(f"{path} is not UTF-8 text (GSM8K-format JSONL was expected).") from exc
    out = []
    for qid, line in enumerate(lines):
        line = line.removesuffix("\r")
        if not line.strip():
            continue
        where = f"{path} line {qid + 1}"
        try:
            item = json.loads(line)
        except ValueError as exc:
            raise EvaluationError(f"{where} is not valid JSON ({exc.msg}); each line must be one JSON object.") from exc
        if not isinstance(item, dict) or not isinstance(item.get("question"), str) or not item["question"].strip():
            raise EvaluationError(f"{where} needs a non-empty \"question\" text (GSM8K format: question, answer).")
        try:
            gold = gold_answer(item.get("answer"))
        except ValueError as exc:
            raise EvaluationError(f"{where}: unusable \"answer\": {exc}.") from exc
        out.append(Question(qid, item["question"], gold))
    if not out:
        raise EvaluationError(f"{path} holds no questions.")
    return out


def select_questions(questions: list[Question], limit: int | None, seed: int) -> list[Question]:
    """``limit`` questions chosen by ``seed``, in file order. The same every time; a larger limit with the
    same seed keeps every question of a smaller one (so raising ``--limit`` extends a finished run)."""
    if limit is None or limit >= len(questions):
        return list(questions)
    order = list(range(len(questions)))
    random.Random(seed).shuffle(order)
    return [questions[i] for i in sorted(order[:limit])]


def build_prompt(question: str) -> str:
    return f"{question.strip()}\n{INSTRUCTION}"


def is_corrupted(text: str) -> bool:
    """Broken output: a replacement character (cut bytes) or one non-space character repeated 8+ times."""
    return "\ufffd" in text or _CORRUPT_RUN.search(text) is not None


def is_looping(text: str, words: int = LOOP_WORDS, repeats: int = LOOP_REPEATS) -> bool:
    """A phrase loop: one sequence of ``words`` whitespace-separated words occurs ``repeats`` or more times.

    Degenerate ensembles rarely emit broken characters (``is_corrupted``); they repeat a sentence with small
    changes ("3. The number of bags ... is 110 cups." / "4. The number of bags ... is 110 cups." ...). On the
    GSM8K run in docs/results.md, 8 words 4 times flags 2 of 60 single-qwen answers and 53-67% of ensemble ones.
    """
    tokens = text.split()
    counts: dict[tuple[str, ...], int] = {}
    for i in range(len(tokens) - words + 1):
        gram = tuple(tokens[i : i + words])
        counts[gram] = counts.get(gram, 0) + 1
        if counts[gram] >= repeats:
            return True
    return False


def _looping(row: dict) -> bool:
    """A row's loop flag; rows written before the flag existed get it from their text."""
    value = row.get("looping")
    if value is not None:
        return bool(value)
    text = row.get("text")
    return is_looping(text if isinstance(text, str) else "")


# -- summary ------------------------------------------------------------------------------------------------
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
                "loop_rate": round(sum(1 for r in group if _looping(r)) / n, 6),
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


# -- running --------------------------------------------------------------------------------------------------
@dataclass
class EvalConfig:
    """What to evaluate and where the results go.

    Attributes:
        data: GSM8K-format JSONL file.
        methods: parsed ``--methods`` (see :func:`parse_methods`).
        models: the ensemble's models, in order (ensemble methods use all of them).
        out: output folder (created; reused to resume).
        settings: engine settings; ``settings.seed`` also picks the question subset.
        limit: how many questions (None = all).
        device / dtype: recorded in meta.json (models are loaded by the caller).
        command: the command line, for meta.json.
        arguments: the parsed command-line arguments, for meta.json.
    """

    data: str | os.PathLike
    methods: list[MethodSpec]
    models: list[str]
    out: str | os.PathLike
    settings: Settings = field(default_factory=Settings)
    limit: int | None = None
    device: str = "cpu"
    dtype: str = "auto"
    command: str = ""
    arguments: dict = field(default_factory=dict)

    def validate(self) -> EvalConfig:
        """Check the methods against the models and settings before anything is loaded."""
        if self.limit is not None and (isinstance(self.limit, bool) or not isinstance(self.limit, int) or self.limit < 1):
            raise EvaluationError(f"--limit must be a whole number of at least 1, not {self.limit!r}.")
        if not self.methods:
            raise EvaluationError(f"No methods to evaluate: give --methods, a comma list of {SPEC_HELP}.")
        if any(s.model is None and not s.members for s in self.methods) and not self.models:
            raise EvaluationError("Ensemble methods need --models (e.g. --models qwen,smollm2,gemma3).")
        for spec in self.methods:
            try:
                spec.settings(self.settings).validate(spec.method, spec.model_names(self.models))
            except EnsembleError as exc:
                raise EvaluationError(f"{spec.label}: {exc}") from exc
        return self

    def model_names(self) -> list[str]:
        """Every model the methods need, each once (the ensemble's first, then single-model ones)."""
        names = [] if all(s.model or s.members for s in self.methods) else list(self.models)
        for spec in self.methods:
            for name in spec.model_names(self.models):
                if name not in names:
                    names.append(name)
        return names

    def fingerprint(self, data_sha256: str) -> dict:
        """What must not change between runs writing into one folder (else results would not be comparable)."""
        return json.loads(json.dumps({
            "data_sha256": data_sha256,
            "models": list(self.models),
            "settings": self.settings.to_dict(),
            "instruction": INSTRUCTION,
        }))


def _now() -> str:
    return _dt.datetime.now(_dt.UTC).astimezone().isoformat(timespec="seconds")


def file_sha256(path: str | os.PathLike) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


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
    return {k: info.get(k) for k in ("architecture", "parameters", "dtype", "vocab")} | {"source": getattr(model, "source", None)}


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
    if any(k not in row for k in ROW_FIELDS if k not in _LATER_ROW_FIELDS):
        return None
    row["looping"] = _looping(row)  # rows written before the flag existed get it from their text
    return row


def make_row(question: Question, label: str, trace=None, error: str | None = None, latency_s: float = 0.0) -> dict:
    """The result row of one (question, method) run."""
    text = trace.text if trace is not None else ""
    stats = trace.stats if trace is not None else None
    prediction = extract_answer(text)
    return {
        "qid": question.qid,
        "method": label,
        "prediction": prediction,
        "gold": question.gold,
        "correct": same_number(prediction, question.gold),
        "tokens": stats.generated_tokens if stats else 0,
        "et_ratio": stats.et_ratio if stats else 0.0,
        "latency_s": stats.latency_s if stats else round(latency_s, 4),
        "tokens_per_s": stats.tokens_per_s if stats else 0.0,
        "stop_reason": stats.stop_reason if stats else "error",
        "corrupted": is_corrupted(text),
        "looping": is_looping(text),
        "error": error or (trace.error if trace is not None else None),
        "question": question.question,
        "text": text,
        **_segment_outcome(trace),
        "replaced": stats.decisions.get("ensembled_replaced", 0) if stats else 0,
        "discarded": stats.draft_discarded if stats else 0,
    }


def _segment_outcome(trace) -> dict:
    """For a segment method (SpecEM): how many segments each model's draft won, and the Hedge weights after the
    last round, the paper's claim being that weight moves toward the stronger model. None for other methods."""
    rounds = [r for r in (trace.rounds if trace is not None else []) if r.weights_after]
    if not rounds:
        return {"segment_wins": None, "final_weights": None}
    wins = {name: 0 for name in rounds[-1].weights_after}
    for r in rounds:
        if r.winner in wins:
            wins[r.winner] += 1
    return {"segment_wins": wins, "final_weights": dict(rounds[-1].weights_after)}


def _append_row(fh, row: dict) -> None:
    fh.write(json.dumps(row, ensure_ascii=False) + "\n")
    fh.flush()
    os.fsync(fh.fileno())


def _sort_rows(rows: list[dict], methods: list[str]) -> list[dict]:
    rank = {m: i for i, m in enumerate(methods)}
    return sorted(rows, key=lambda r: (r["qid"], rank.get(r["method"], len(rank)), r["method"]))


def write_rows_csv(path: str | os.PathLike, rows: list[dict]) -> None:
    with open(path, "w", encoding="utf-8", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=ROW_FIELDS, extrasaction="ignore")
        writer.writeheader()
        for row in rows:
            writer.writerow({k: _csv_cell(row.get(k)) for k in ROW_FIELDS})


def _csv_cell(value):
    if value is None:
        return ""
    return json.dumps(value, ensure_ascii=False) if isinstance(value, dict) else value


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


def write_summary(out: str | os.PathLike, summary: list[dict], meta: dict, rows: list[dict] | None = None) -> None:
    """``summary.csv`` (machine-readable, see :func:`load_summary`) and ``summary.md`` (for people; with the rows,
    also a table of segment wins and final weights for SpecEM)."""
    out = Path(out)
    with open(out / "summary.csv", "w", encoding="utf-8", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=SUMMARY_FIELDS)
        writer.writeheader()
        writer.writerows(summary)
    (out / "summary.md").write_text(summary_markdown(summary, meta, segment_summary(rows or [])), encoding="utf-8")


def summary_markdown(summary: list[dict], meta: dict, segments: dict[str, dict] | None = None) -> str:
    s = meta.get("settings", {})
    lines = [
        f"# Evaluation: {Path(meta.get('data', {}).get('path', 'data')).name}, {meta.get('selected', '?')} questions",
        "",
        *_scope_lines(meta),
        f"- models: {', '.join(meta.get('models', []))}",
        f"- max_new_tokens {s.get('max_new_tokens')}, temperature {s.get('temperature')}, seed {meta.get('seed')}, "
        f"limit {meta.get('limit')}",
        f"- instruction appended to each question: \"{meta.get('instruction', INSTRUCTION)}\"",
        f"- command: `{meta.get('command', '')}`",
        "",
        "| method | n | correct | accuracy (95% Wilson CI) | mean E/T | tokens/s | s/question | corrupted | phrase loops "
        "| budget reached | mean tokens |",
        "|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in summary:
        lines.append(
            f"| {r['method']} | {r['n']} | {r['correct']} | {100 * r['accuracy']:.1f}% "
            f"({100 * r['ci_low']:.1f}–{100 * r['ci_high']:.1f}%) | {r['mean_et']:.3f} | {r['tokens_per_s']:.2f} | "
            f"{r['s_per_question']:.2f} | {100 * r['corruption_rate']:.1f}% | {100 * r['loop_rate']:.1f}% | "
            f"{100 * r['budget_rate']:.1f}% | {r['mean_tokens']:.1f} |"
        )
    if not summary:
        lines.append("| (no results yet) | | | | | | | | | | |")
    drafting = [r for r in summary if r.get("replaced_per_100") or r.get("discarded_per_100")]
    if drafting:
        lines += ["", "Drafting (SAFE): replaced and discarded draft tokens per 100 generated tokens.", "",
                  "| method | replacements / 100 tokens | discarded drafts / 100 tokens |", "|---|---:|---:|"]
        lines += [f"| {r['method']} | {r['replaced_per_100']:.2f} | {r['discarded_per_100']:.2f} |" for r in drafting]
    if segments:
        lines += ["", "Segment ensembles: segments each model's draft won, and its Hedge weight after the last round "
                  "(mean over questions; equal weights at the start).", "",
                  "| method | questions | model | segments won | mean final weight |", "|---|---:|---|---:|---:|"]
        for method, entry in segments.items():
            for name, weight in entry["mean_final_weight"].items():
                lines.append(f"| {method} | {entry['questions']} | {name} | {entry['wins'].get(name, 0)} | {weight:.3f} |")
    return "\n".join(lines) + "\n"


def _scope_lines(meta: dict) -> list[str]:
    shared, selected = meta.get("summarized_questions"), meta.get("selected")
    if shared is None or shared == selected:
        return []
    return [
        f"**Incomplete run: the table covers the {shared} of {selected} questions that every method has finished** "
        "(rerun the command to continue).",
        "",
    ]


def write_html_report(out: str | os.PathLike, summary: list[dict], meta: dict) -> bool:
    """``report.html`` through the visual layer; False (with a warning) when that layer is not installed."""
    try:
        from visual import write_report
    except ImportError as exc:
        print(f"warning: report.html not written: the visual package is not available ({exc}).", file=sys.stderr)
        return False
    title = f"Ensemble Lens evaluation: {Path(meta.get('data', {}).get('path', 'data')).name}, {meta.get('selected', '?')} questions"
    write_report([dict(r) for r in summary], Path(out) / "report.html", title, report_meta(meta))
    return True


def report_meta(meta: dict) -> dict:
    """The header of report.html: what a reader needs to reproduce the numbers (meta.json has everything)."""
    settings = meta.get("settings", {})
    machine = meta.get("machine", {})
    shown = ("max_new_tokens", "temperature", "top_k", "lookahead", "segment_len", "eta", "sharpen", "gac_gate")
    return {
        "command": meta.get("command", ""),
        "data": f"{meta.get('data', {}).get('path', '')} (sha256 {meta.get('data', {}).get('sha256', '')[:12]}…)",
        "questions": f"{meta.get('selected')} of {meta.get('data', {}).get('questions')} (limit {meta.get('limit')}, seed {meta.get('seed')})"
        + (f"; summarized: the {meta['summarized_questions']} every method finished"
           if meta.get("summarized_questions") not in (None, meta.get("selected")) else ""),
        "models": ", ".join(meta.get("models", [])),
        "methods": ", ".join(meta.get("methods", [])),
        "settings": ", ".join(f"{k} {settings.get(k)}" for k in shown if k in settings),
        "instruction": meta.get("instruction", ""),
        "machine": f"{machine.get('platform')}, {machine.get('cpu_count')} CPUs, {machine.get('torch_threads')} torch threads"
        + (f", {machine['cuda']}" if machine.get("cuda") else ""),
        "device / dtype": f"{meta.get('device')} / {meta.get('dtype')}",
        "dates": f"created {meta.get('created')}, finished {meta.get('finished')}",
    }


def _as_model_map(models) -> dict:
    if isinstance(models, Mapping):
        return dict(models)
    return {m.name: m for m in models}


def run_evaluation(config: EvalConfig, models, progress: bool = True) -> list[dict]:
    """Evaluate every method on the selected questions, resuming what ``config.out`` already holds.

    Args:
        config: what to run (validated here).
        models: the loaded models, as a name -> LoadedModel mapping or a list (keyed by ``.name``); it must
            hold every model of ``config.models`` and every ``single:NAME``.
        progress: show a tqdm progress bar with ETA on stderr.

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
    with _folder_lock(out):
        return _run_locked(config, loaded, out, questions_all, questions, data_sha, model_info, progress)


def _unique_rows(rows: Iterable[dict]) -> tuple[list[dict], set[tuple[int, str]]]:
    """The rows with each (question, method) once, first one kept (files joined by hand may repeat rows)."""
    kept, done = [], set()
    for row in rows:
        if (row["qid"], row["method"]) not in done:
            done.add((row["qid"], row["method"]))
            kept.append(row)
    return kept, done


@contextlib.contextmanager
def _folder_lock(out: Path):
    """One evaluation at a time per folder: two writers would run the same questions twice."""
    with open(out / ".lock", "w") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise EvaluationError(f"Another evaluation is writing into {out} right now; wait for it or use another --out folder.") from None
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _run_locked(config, loaded, out, questions_all, questions, data_sha, model_info, progress) -> list[dict]:
    from . import methods as engine

    old_meta = check_compatible(out, config.fingerprint(data_sha), model_info)

    rows_path = out / "rows.jsonl"
    rows, done = _unique_rows(read_rows(rows_path, repair=True))
    labels = [s.label for s in config.methods]
    started = _now()
    meta = _meta(config, old_meta, data_sha, len(questions_all), questions, model_info, started)
    _write_json(out / "meta.json", meta)

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
                    trace = engine.generate(members, build_prompt(question.question), spec.method, spec.settings(config.settings))
                    row = make_row(question, spec.label, trace)
                except Cancelled:
                    raise
                except EnsembleError as exc:
                    bar.write(f"warning: question {question.qid}, {spec.label}: {exc}", file=sys.stderr)
                    row = make_row(question, spec.label, error=str(exc), latency_s=time.perf_counter() - t0)
                _append_row(fh, row)
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
    write_html_report(out, summary, meta)
    return summary


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


def _write_outputs(out: Path, rows: list[dict], question_ids: list[int], labels: list[str], meta: dict) -> list[dict]:
    paired = set(paired_questions(rows, question_ids, labels))
    current = [r for r in rows if r["qid"] in paired and r["method"] in labels]
    meta["summarized_questions"] = len(paired)
    summary = summarize(current, labels)
    write_rows_csv(out / "rows.csv", _sort_rows(rows, labels))
    write_summary(out, summary, meta, current)
    _write_json(out / "meta.json", meta)
    return summary


def rebuild_report(out: str | os.PathLike) -> list[dict]:
    """Rewrite rows.csv, summary.csv/.md and report.html of ``out`` from its rows.jsonl and meta.json, running nothing.

    For folders whose rows.jsonl was joined by hand, e.g. one run split across processes by method: each
    process resumes its own copy of the folder with part of ``--methods``, then the rows files are
    concatenated into the folder whose meta.json lists every method (duplicate rows count once).
    """
    out = Path(out)
    meta_path = out / "meta.json"
    if not meta_path.exists():
        raise EvaluationError(f"{out} has no meta.json: it is not an evaluation folder (made by `python -m ensemble evaluate`).")
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        labels, question_ids = list(meta["methods"]), [int(q) for q in meta["question_ids"]]
    except (ValueError, KeyError, TypeError) as exc:
        raise EvaluationError(f"{meta_path} is not an evaluation meta.json.") from exc
    with _folder_lock(out):
        rows, done = _unique_rows(read_rows(out / "rows.jsonl", repair=True))
        meta["complete"] = all((q, m) in done for q in question_ids for m in labels)
        summary = _write_outputs(out, rows, question_ids, labels, meta)
    write_html_report(out, summary, meta)
    return summary


def _write_json(path: Path, data: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, ensure_ascii=False, indent=1), encoding="utf-8")
    os.replace(tmp, path)


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


# -- command line -------------------------------------------------------------------------------------------
def _positive_int(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, not {value!r}") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {number}")
    return number


def add_evaluate_arguments(p: argparse.ArgumentParser) -> None:
    from .cli import add_engine_options
    from .models import DEFAULT_MODELS

    p.add_argument("--data", required=True, help="GSM8K-format JSONL (question, answer ending in '#### n')")
    p.add_argument("--limit", type=_positive_int, default=None, help="evaluate N questions chosen by --seed (default: all)")
    p.add_argument("--methods", required=True, help=f"comma list of: {SPEC_HELP} (ensemble methods use all of --models)")
    p.add_argument("--models", default=",".join(DEFAULT_MODELS), help="the ensemble's models (default: %(default)s)")
    p.add_argument("--out", required=True, help="output folder; rerunning the same command resumes it")
    p.add_argument("--device", default="cpu", help="cpu | cuda:N | auto")
    p.add_argument("--dtype", default="auto")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_engine_options(p)
    p.set_defaults(func=cmd_evaluate)


def _command_line() -> str:
    argv = sys.argv
    if argv and Path(argv[0]).name == "__main__.py" and Path(argv[0]).parent.name == "ensemble":
        return shlex.join(["python", "-m", "ensemble", *argv[1:]])
    return shlex.join(argv)


def add_report_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("out", help="an evaluation folder (holding meta.json and rows.jsonl)")
    p.set_defaults(func=cmd_report)


def _print_summary(out: str | os.PathLike) -> int:
    """Print the summary.md that ``_write_outputs`` has just written (it has the segment table, which needs the
    rows, so the summary rows alone cannot rebuild it)."""
    print((Path(out) / "summary.md").read_text(encoding="utf-8"), end="")
    return 0


def cmd_report(args) -> int:
    rebuild_report(args.out)
    return _print_summary(args.out)


@contextlib.contextmanager
def _terminate_as_interrupt():
    """SIGTERM (``kill PID``) stops an evaluation like Ctrl-C: its rows are kept and the partial summary is
    written. A run started in the background by a shell cannot be stopped with SIGINT, which such a shell
    makes it ignore."""
    def interrupt(signum, frame):
        raise KeyboardInterrupt

    try:
        previous = signal.signal(signal.SIGTERM, interrupt)
    except ValueError:  # not the main thread: leave signals alone
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def cmd_evaluate(args) -> int:
    from .cli import _models_arg, settings_from_args
    from .errors import UnknownModelError
    from .models import ModelPool, resolve
    from .outputs import check_output_folder

    specs = parse_methods(args.methods)
    settings = settings_from_args(args)
    arguments = {k: v for k, v in vars(args).items() if k != "func"}
    config = EvalConfig(
        data=args.data, methods=specs, models=_models_arg(args.models), settings=settings, out=args.out,
        limit=args.limit, device=args.device, dtype=args.dtype, command=_command_line(), arguments=arguments,
    ).validate()
    check_output_folder(config.out)
    for name in config.model_names():
        try:
            resolve(name)
        except UnknownModelError as exc:
            where = f"single:{name}" if name not in config.models else "--models"
            raise EvaluationError(f"{where}: {exc}") from exc
    questions = load_questions(config.data)
    check_compatible(config.out, config.fingerprint(file_sha256(config.data)))
    pool = ModelPool(device=args.device, dtype=args.dtype)
    loaded = {name: pool.get(name) for name in config.model_names()}
    selected = len(select_questions(questions, config.limit, settings.seed))
    print(f"evaluating {len(specs)} method(s) on {selected} question(s) into {config.out}", file=sys.stderr)
    with _terminate_as_interrupt():
        run_evaluation(config, loaded, progress=not args.no_progress)
    return _print_summary(config.out)
