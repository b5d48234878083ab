"""Defensive readers for trace records: the fields of an uploaded trace's ``details`` hold whatever the file held."""

from __future__ import annotations

import math

from ensemble.tokens.key_table import EOS_KEY
from ensemble.trace import DrafterDetails, RunTrace, TokenRecord, finite

MAX_WINDOW = 160  # characters around a decision; caps what a malformed uploaded trace can make us draw


def find_record(trace: RunTrace, index) -> TokenRecord | None:
    """The record whose ``index`` is ``index`` (an int or the strip's ``data-i`` string), or None."""
    try:
        i = int(index)
    except (TypeError, ValueError):
        return None
    if 0 <= i < len(trace.tokens) and trace.tokens[i].index == i:
        return trace.tokens[i]
    return next((t for t in trace.tokens if t.index == i), None)


def setting(trace: RunTrace, name: str):
    """One of the run's (effective) settings, None when absent."""
    return trace.settings.get(name) if isinstance(trace.settings, dict) else None


def drafter_of(record: TokenRecord, trace: RunTrace) -> str:
    """The SAFE drafter behind a record: the record's own model, except ``ensemble`` for a replaced token, whose
    drafter the trace records (:meth:`RunTrace.from_dict` fills it in for older traces)."""
    if record.model in trace.models:
        return record.model
    if trace.drafter in trace.models:
        return trace.drafter
    return record.model


def number(value) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def text(value) -> str | None:
    return value if isinstance(value, str) else None


def names(value) -> list[str]:
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def mapping(value) -> dict:
    return {k: v for k, v in value.items() if isinstance(k, str)} if isinstance(value, dict) else {}


def pairs(value) -> list[tuple[str, float]]:
    """``[[key, probability], ...]`` as tuples, malformed entries dropped."""
    out = []
    for item in value if isinstance(value, list) else []:
        if isinstance(item, list | tuple) and len(item) == 2 and isinstance(item[0], str) and number(item[1]) is not None:
            out.append((item[0], float(item[1])))
    return out


def integer(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def spans(value, limit: int = 10_000) -> list[tuple[str, int, int]]:
    """``[[text, start, end], ...]`` (a model's ``splits``) as tuples; entries whose text does not fit the span dropped.

    A token that ends inside a character (the last one of an unfinished draft) holds the text up to the end
    plus U+FFFD: its text is one character longer than its span.
    """
    out = []
    for item in value if isinstance(value, list) else []:
        if (
            isinstance(item, list | tuple)
            and len(item) == 3
            and isinstance(item[0], str)
            and all(integer(x) is not None for x in item[1:])
            and 0 <= item[1] <= item[2] <= limit
            and (len(item[0]) == item[2] - item[1] or (is_incomplete(item[0]) and len(item[0]) == item[2] - item[1] + 1))
        ):
            out.append((item[0], item[1], item[2]))
    return out


def is_incomplete(piece: str) -> bool:
    """True for a ``splits`` piece that ends inside a character (its text ends with U+FFFD)."""
    return piece.endswith("\ufffd")


def splits(value, limit: int) -> dict[str, list[tuple[str, int, int]]]:
    """Each model's tokens around a decision (a record's ``details.splits``), models without a usable token left out."""
    found = {model: spans(value, limit) for model, value in mapping(value).items()}
    return {model: tokens for model, tokens in found.items() if tokens}


END_TEXTS = ("<eos>", EOS_KEY)


def is_end(record: TokenRecord, text_len: int) -> bool:
    """True for the record of the end of sequence: zero-width, at the end of the response, text ``<eos>``.

    Args:
        text_len: length of the response so far (while streaming) or of the whole response.
    """
    return (
        record.start == record.end
        and record.start >= text_len
        and record.text in END_TEXTS
        and not (isinstance(record.details, DrafterDetails) and record.details.control_token)
    )


def record_dict(record: TokenRecord) -> dict:
    return finite(record.to_dict())
