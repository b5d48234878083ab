"""One (question, method) run as a result row: the extracted answer, whether it is right, and the flags for
broken output (cut characters, phrase loops)."""

from __future__ import annotations

import re

from .answers import extract_answer, same_number
from .data import Question

ROW_FIELDS = ["qid", "method", "prediction", "gold", "correct", "tokens", "et_ratio", "latency_s", "tokens_per_s",
              "stop_reason", "corrupted", "looping", "error", "question", "text", "segment_wins", "final_weights",
              "replaced", "discarded"]
LATER_ROW_FIELDS = ("looping", "segment_wins", "final_weights", "replaced", "discarded")
"""Row fields added after the first runs; older rows without them stay valid."""
_CORRUPT_RUN = re.compile(r"(\S)\1{7,}")
LOOP_WORDS, LOOP_REPEATS = 8, 4


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


def looping(row: dict) -> bool:
    """A row's loop flag; rows written before the flag existed get it from their text."""
    value = row.get("looping")
    if value is not None:
        return bool(value)
    text = row.get("text")
    return is_looping(text if isinstance(text, str) else "")


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
