"""Numbers as the views show them: one formatter, so every view writes a missing value and a rounding the same way."""

from __future__ import annotations

from .records import number


def number_text(value, digits: int = 2, missing: str = "–", suffix: str = "", scale: float = 1.0, tiny: bool = False) -> str:
    """``value`` with ``digits`` decimals, or ``missing`` when it is not a finite number.

    Args:
        scale: multiply first (100 with ``suffix="%"`` for a percentage).
        tiny: a positive value that would round to zero is written "<0.01" (HTML-escaped) instead of "0.00".
    """
    v = number(value)
    if v is None:
        return missing
    v *= scale
    if tiny and 0 < v < 0.5 * 10**-digits:
        return f"&lt;{10**-digits:.{digits}f}"
    if digits == 0 and v.is_integer():
        return f"{int(v)}{suffix}"
    return f"{v:.{digits}f}{suffix}"
