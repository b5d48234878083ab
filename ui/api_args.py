"""The API's and uploads' arguments read as the user meant them, and refusals that say what to fix.

A script calling the API sends what JSON allows: a token number may come as ``"1"``, settings as a JSON string.
These helpers accept what is clearly meant (a whole number as text) and refuse the rest with a sentence in the
user's terms, never Python's own words (``invalid literal for int()``, ``Expecting value: line 1 column 1``).
"""

from __future__ import annotations

import json
from pathlib import Path

from ensemble.errors import InputError


def token_number(value, name: str, count: int | None = None) -> int:
    """``value`` as a token number (an int, or a whole number as text such as ``"3"``); with ``count``, one of the
    trace's tokens #0 to #count-1."""
    number = None
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, float) and value.is_integer():
        number = int(value)
    elif isinstance(value, str) and value.strip().lstrip("-").isdigit() and len(value.strip()) < 12:
        number = int(value.strip())
    if number is None:
        shown = json.dumps(value)[:40] if isinstance(value, str | int | float | bool | None) else type(value).__name__
        raise InputError(f"{name} must be a token number (0 is the answer's first token), not {shown}.")
    if count is not None and not 0 <= number < count:
        has = f"it has tokens #0 to #{count - 1}" if count else "it has no tokens"
        raise InputError(f"Token #{number} is not in this trace: {has}.")
    return number


def settings_object(value) -> dict:
    """The API's ``settings``: a JSON object of engine options, given as an object or as its JSON text."""
    if value is None or value == "":
        return {}
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError as exc:
            raise InputError(f'settings must be a JSON object of engine options, such as {{"max_new_tokens": 64}}; '
                             f"{json.dumps(value[:30])} is not JSON ({exc.msg.lower()} at character {exc.pos}).") from None
    if not isinstance(value, dict):
        raise InputError('settings must be a JSON object of engine options, such as {"max_new_tokens": 64}, '
                         f"not a {type(value).__name__}.")
    return value


def without_path(message: str, path) -> str:
    """``message`` with the server's path of an uploaded file replaced by the file's own name (the browser's)."""
    full = str(path)
    return message.replace(full, Path(full).name) if full else message
