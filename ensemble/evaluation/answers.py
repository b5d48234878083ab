"""Final numbers of math answers: what a model answered, what GSM8K expects, and whether they match.

Small chat models end their answers in many ways ("The answer is $18.", "#### 18", "\\boxed{18}",
"**Answer:** 18 clips"), so :func:`extract_answer` tries the explicit forms first and falls back to the
last number in the text. Numbers are normalised (``$``, thousands commas, trailing zeros removed) so that
"3.50" and "3.5" compare equal.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

# A number: thousands with commas ("1,000,000"), plain digits, optional decimals. A leading minus counts
# only when it is not glued to a word or a digit ("16-3" is a subtraction, "-3" on its own is negative).
_NUM_CORE = r"[-−]?(?:(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|\.\d+)(?!\d)"
_NUMBER_RE = re.compile(r"(?<!\w)" + _NUM_CORE)
_HASHES_RE = re.compile(r"####\s*(?:\\?\$\s*)?(" + _NUM_CORE + ")")
_BOXED_RE = re.compile(r"\\boxed\s*\{((?:[^{}]|\{[^{}]*\})*)\}")
# "The answer is 18", "Final answer: $18", "answer is **18 clips**", "The answer is $\\boxed{18}$".
_ANSWER_RE = re.compile(
    r"answer\s*(?:is|=|:)\s*:?[\s*$:~]*(?:\\\(|\\\$|\\boxed\s*\{|approximately\s+|about\s+)*\s*\$?\s*("
    + _NUM_CORE
    + r")([^\n]*)",
    re.IGNORECASE,
)
_SENTENCE_END = re.compile(r"\.(?!\d)|[!?;]")


def normalize_number(text: str | None) -> str | None:
    """Canonical form of a number written by a person or a model, or None if it is not a number.

    >>> normalize_number("$1,250.50")
    '1250.5'
    """
    value = _to_decimal(text)
    if value is None:
        return None
    if value == value.to_integral_value():
        return str(int(value))
    return format(value.normalize(), "f")


def _to_decimal(text) -> Decimal | None:
    if text is None:
        return None
    cleaned = str(text).strip().replace("−", "-").replace(",", "").replace("$", "").replace(" ", "")
    cleaned = cleaned.rstrip(".")
    if not re.fullmatch(r"-?(?:\d+(?:\.\d*)?|\.\d+)", cleaned):
        return None
    try:
        return Decimal(cleaned)
    except InvalidOperation:
        return None


def _last_number(text: str) -> str | None:
    found = _NUMBER_RE.findall(text)
    return normalize_number(found[-1]) if found else None


def extract_answer(text: str | None) -> str | None:
    """The final number of a model's answer (normalised), or None when the text holds no number.

    Order: the last ``#### n``; the last ``\\boxed{...}`` (its last number); the first "answer is n" /
    "answer: n" (the instruction asks the model to finish with it, so anything after it is usually the
    model rambling on); otherwise the last number in the text. In "the answer is 16 - 3 - 4 = 9" the
    number after the last "=" is taken.
    """
    if not text:
        return None
    hashes = _HASHES_RE.findall(text)
    if hashes:
        return normalize_number(hashes[-1])
    for boxed in reversed(_BOXED_RE.findall(text)):
        number = _last_number(boxed)
        if number is not None:
            return number
    match = _ANSWER_RE.search(text)
    if match:
        first, rest = match.group(1), match.group(2)
        end = _SENTENCE_END.search(rest)
        sentence = rest[: end.start()] if end else rest
        if "=" in sentence:
            after = _NUMBER_RE.findall(sentence.rsplit("=", 1)[1])
            if after:
                return normalize_number(after[0])
        return normalize_number(first)
    return _last_number(text)


def gold_answer(answer_field: str) -> str:
    """The reference number of a GSM8K ``answer`` field (the text after its last ``####``), normalised.

    Raises:
        ValueError: the field has no ``#### number`` and is not a bare number either.
    """
    if not isinstance(answer_field, str):
        raise ValueError(f"the answer must be text, not {type(answer_field).__name__}")
    if "####" in answer_field:
        tail = answer_field.rsplit("####", 1)[1].strip()
        number = normalize_number(tail)
        if number is None:
            found = _NUMBER_RE.findall(tail)
            number = normalize_number(found[0]) if found else None
        if number is not None:
            return number
        raise ValueError(f"the text after '####' is not a number: {tail[:40]!r}")
    number = normalize_number(answer_field)
    if number is None:
        raise ValueError("the answer does not end with '#### number'")
    return number


def same_number(a: str | None, b: str | None) -> bool:
    """Whether two answers are the same number ("3.50" == "3.5", "$1,000" == "1000"); None never matches."""
    x, y = _to_decimal(a), _to_decimal(b)
    return x is not None and y is not None and x == y
