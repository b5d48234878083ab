"""Per-session state of the app: each browser session's latest run (live or uploaded), its stop flag, its selected
token, and the ordering of its token clicks. No model and no UI component here: ``app.py`` wires it.

The store is bounded twice: at most 128 sessions, and at most ``ENSEMBLE_LENS_SESSIONS_MB`` megabytes (default
1024) of traces kept by all of them together (runs, uploads, comparisons; a trace two sessions share, such as the
recorded first view, counts once). Past either bound the least recently used sessions are dropped, except the one
asking and those still streaming; a dropped session starts again empty (its strip asks for a run or an upload). A
trace's memory is estimated from what it holds (:func:`trace_bytes`: tokens, top-k pairs, splits, text): never
below what Python allocates for it and at most about 1.5 times that (tracemalloc, on the test fixtures and on a
trace of 256,000 top-k pairs).
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from ensemble.trace import RunTrace

BUDGET_MB = float(os.environ.get("ENSEMBLE_LENS_SESSIONS_MB", "1024"))
_HOLDS = ("job", "trace", "imported", "compare", "selected")  # the entry's keys that hold traces


class _Entry(dict):
    """A session's state (a dict, as the handlers use it); storing a trace in it re-checks the store's budget."""

    def __init__(self, store: Sessions, key: str):
        super().__init__(job=None, trace=None, cancel=threading.Event(), busy=0)
        self._store, self._key = store, key

    def __setitem__(self, name, value) -> None:
        super().__setitem__(name, value)
        if name in _HOLDS and value is not None:
            self._store.account(self._key)


class Sessions:
    """The latest run (live or uploaded) and the stop flag of each browser session, bounded in number and in the
    memory their traces take (least recently used first out)."""

    def __init__(self, limit: int = 128, budget_bytes: int | None = None):
        self._data: OrderedDict[str, dict] = OrderedDict()
        self._lock = threading.Lock()
        self.limit = limit
        self.budget_bytes = int(BUDGET_MB * 1e6) if budget_bytes is None else budget_bytes

    def get(self, key: str) -> dict:
        with self._lock:
            entry = self._data.pop(key, None) or _Entry(self, key)
            self._data[key] = entry
            while len(self._data) > self.limit:
                self._data.popitem(last=False)
            self._evict(keep=key)
            return entry

    def account(self, key: str) -> None:
        """Evict for what session ``key`` now holds (its entry calls this when a trace is stored in it)."""
        with self._lock:
            if key in self._data:
                self._evict(keep=key)

    def kept_bytes(self) -> int:
        """The estimated memory of every trace the sessions keep (each counted once)."""
        with self._lock:
            return sum(trace_bytes(t) for t in self._traces(self._data.values()).values())

    def _evict(self, keep: str) -> None:
        """Drop least recently used sessions (not ``keep``, none streaming) while the traces exceed the budget."""
        traces = self._traces(self._data.values())
        total = sum(trace_bytes(t) for t in traces.values())
        for key in list(self._data):
            if total <= self.budget_bytes:
                return
            entry = self._data[key]
            if key == keep or entry["busy"]:
                continue
            del self._data[key]
            left = self._traces(self._data.values())
            total -= sum(trace_bytes(t) for i, t in traces.items() if i not in left)
            traces = left

    @staticmethod
    def _traces(entries) -> dict[int, RunTrace]:
        """The distinct traces ``entries`` hold (by identity): shown, uploaded, selected, compared, running."""
        found: dict[int, RunTrace] = {}
        for entry in entries:
            job, selected = entry.get("job"), entry.get("selected")
            held = [entry.get("trace"), entry.get("imported"), job.trace if job is not None else None,
                    selected[0] if isinstance(selected, tuple) else None, *(entry.get("compare") or {}).values()]
            found.update((id(t), t) for t in held if isinstance(t, RunTrace))
        return found

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


# What Python allocates for a trace's parts, measured with tracemalloc on the fixtures and on a trace of 256,000
# top-k pairs (bytes; rounded up, so the estimate errs on the large side).
_BASE, _TOKEN, _PAIR, _SPLIT, _ROUND = 16_000, 800, 180, 300, 2_000


def trace_bytes(trace: RunTrace) -> int:
    """The estimated memory ``trace`` takes; a finished trace's is computed once (a live one grows)."""
    cached = getattr(trace, "_kept_bytes", None)
    if cached is not None and cached[0] == len(trace.tokens):
        return cached[1]
    pairs = splits = 0
    chars = len(trace.text) + len(trace.prompt)
    for tok in trace.tokens:
        chars += len(tok.text)
        pairs += _length(tok.topk)
        if tok.fusion is not None:
            pairs += _length(tok.fusion.before) + _length(tok.fusion.after) + _lengths(tok.fusion.per_model)
        pairs += _lengths(getattr(tok.details, "per_model_top", None))
        splits += _lengths(tok.details.splits)
        if tok.details.extra:
            chars += 4 * len(str(tok.details.extra))
    for rnd in trace.rounds:
        chars += len(rnd.accepted_text) + sum(len(str(c.get("text", ""))) for c in rnd.candidates)
    size = _BASE + _TOKEN * len(trace.tokens) + _PAIR * pairs + _SPLIT * splits + _ROUND * len(trace.rounds) + chars
    object.__setattr__(trace, "_kept_bytes", (len(trace.tokens), size))
    return size


def _length(value) -> int:
    return len(value) if isinstance(value, list) else 0


def _lengths(mapping) -> int:
    return sum(_length(v) for v in mapping.values()) if isinstance(mapping, dict) else 0
