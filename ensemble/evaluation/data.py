"""The questions: GSM8K-format JSONL, the seeded subset of a run, and the prompt each method sees."""

from __future__ import annotations

import json
import os
import random
from dataclasses import dataclass
from pathlib import Path

from ..errors import EvaluationError
from .answers import gold_answer

INSTRUCTION = "Solve it step by step, then finish with 'The answer is N.' where N is the final number."
"""Appended to every question (after a newline) so that models end with an answer we can extract."""

GSM8K_TEST = Path(__file__).resolve().parents[1] / "data" / "gsm8k" / "test.jsonl"
"""The GSM8K test set (1,319 questions, MIT licence beside it), shipped inside the package: the default data of
``evaluate`` and ``bench`` in a checkout and in an installed wheel alike."""


def shown_path(path: str | os.PathLike) -> str:
    """A data path as a report records it: relative to the working folder when inside it (a checkout's reports
    then name ``ensemble/data/gsm8k/test.jsonl``, not the machine's absolute path), else as given."""
    resolved = Path(path).resolve()
    try:
        return str(resolved.relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


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


SEEN = 60
"""Questions the project evaluates and has read traces of (``--limit 60 --seed 0``, docs/results/gsm8k-60-*)."""


def select_held_out(questions: list[Question], limit: int, seen: int = SEEN) -> list[Question]:
    """``limit`` questions outside the ``seen`` ones seed 0 chooses (the same shuffle's next ones, in its order):
    prompts the project has not tuned anything on, for ``bench``'s whole answers."""
    order = list(range(len(questions)))
    random.Random(0).shuffle(order)
    return [questions[i] for i in order[seen : seen + limit]]


def build_prompt(question: str) -> str:
    return f"{question.strip()}\n{INSTRUCTION}"
