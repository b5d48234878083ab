"""Small pieces of the inspector's sentences: a key, a model name, a probability, lists and verbs."""

from __future__ import annotations

from ensemble.trace import RunTrace, TokenRecord

from . import records as rd
from .escape import safe, whitespace
from .numbers import number_text


def _k(text: str) -> str:
    """A token or key, quoted visibly (whitespace drawn)."""
    return f'<code class="el-key">{whitespace(text, True, breaks=False)}</code>'


def _m(name) -> str:
    return f"<b>{safe(name)}</b>"


def _p(value) -> str:
    return number_text(value, 2, missing="?", tiny=True)


def _join(items: list[str]) -> str:
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]


def _verb(who: list, one: str, many: str) -> str:
    return one if len(who) == 1 else many


def _is_end(record: TokenRecord, trace: RunTrace) -> bool:
    return rd.is_end(record, len(trace.text))
