"""Per-session state of the app: each browser session's latest run (live or uploaded), its stop flag, its selected
token, and the ordering of its token clicks. No model and no UI component here: ``app.py`` wires it."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from ensemble.trace import RunTrace


class Sessions:
    """The latest run (live or uploaded) and the stop flag of each browser session, bounded in number."""

    def __init__(self, limit: int = 128):
        self._data: OrderedDict[str, dict] = OrderedDict()
        self._lock = threading.Lock()
        self.limit = limit

    def get(self, key: str) -> dict:
        with self._lock:
            entry = self._data.pop(key, None) or {"job": None, "trace": None, "cancel": threading.Event(), "busy": 0}
            self._data[key] = entry
            while len(self._data) > self.limit:
                self._data.popitem(last=False)
            return entry

    def latest_click(self, key: str, target: str, seq, **store) -> bool:
        """Whether click ``seq`` on ``target`` is the newest one this session has seen (and, if so, records it and
        ``store``). Gradio replays a deferred event with its *first* event data and runs parallel clicks in any order,
        so the strip numbers its clicks and a handler drops its answer when a newer click has come in meanwhile."""
        with self._lock:
            entry = self._data.get(key)
            if entry is None:
                return True
            seen = entry.setdefault("clicks", {})
            if isinstance(seq, int) and seq < seen.get(target, -1):
                return False
            if isinstance(seq, int):
                seen[target] = seq
            entry.update(store)
            return True

    def trace(self, key: str) -> RunTrace | None:
        entry = self.get(key)
        if entry["job"] is not None:
            return entry["job"].trace
        return entry["trace"]


def click_data(evt) -> dict:
    """What a custom HTML click passed to ``trigger('click', {...})``."""
    data = getattr(evt, "_data", None)
    return data if isinstance(data, dict) else {}


def if_newest(sessions: Sessions, key: str, target: str, evt, answer: Callable[[], tuple[Any, dict]]):
    """``answer()``'s first part for a click on ``target``, or None where a newer click of the session has overtaken
    it, before or while it was built. Its second part (what to store in the session) is kept for the newest only."""
    seq = click_data(evt).get("seq")
    if not sessions.latest_click(key, target, seq):
        return None
    result, store = answer()
    return result if sessions.latest_click(key, target, seq, **store) else None
