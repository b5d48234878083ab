"""Per-session state of the app: each browser session's latest run (live or uploaded), its stop flag, its selected
token, and the ordering of its token clicks (:class:`Session`). No model and no UI component here.

The store is bounded twice: at most 128 sessions, and at most ``ENSEMBLE_LENS_SESSIONS_MB`` megabytes (default
1024) of traces kept by all of them together (runs, uploads, comparisons; a trace two sessions share, such as the
recorded first view, counts once) and of their open evaluation folders (the Results tab's: rows in memory, an
uploaded .zip's unpacked files; such a copy is removed when another folder replaces it, when its session is dropped
and when its page closes). Past either bound the least recently used sessions are dropped, except the one
asking and those still streaming; a dropped session starts again empty (its strip asks for a run or an upload). A
trace's memory is estimated from what it holds (:func:`trace_bytes`: tokens, top-k pairs, splits, text): never
below what Python allocates for it and at most about 1.5 times that (tracemalloc, on the test fixtures and on a
trace of 256,000 top-k pairs).
"""

from __future__ import annotations

import os
import shutil
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ensemble.trace import RunTrace

BUDGET_MB = float(os.environ.get("ENSEMBLE_LENS_SESSIONS_MB", "1024"))
_HOLDS = ("running", "trace", "imported", "compare", "selected", "evaluation")  # the fields that hold traces or a folder


@dataclass(eq=False)
class Session:
    """One browser session's state. Storing a trace in it (a field of ``_HOLDS``) re-checks the store's budget."""

    running: RunTrace | None = None  # the live trace of the run still streaming (its tokens grow)
    trace: RunTrace | None = None  # the trace the Run tab shows (a finished run, an upload, an evaluation's answer)
    imported: RunTrace | None = None  # the trace an upload just loaded (None: the upload was refused)
    compare: dict[str, RunTrace] = field(default_factory=dict)  # the Compare tab's runs by method, what a card click inspects
    selected: tuple[RunTrace, int] | None = None  # the newest clicked token of the strip, where a fork starts
    evaluation: Any = None  # the evaluation folder the Results tab opened (``ensemble.evaluation.explorer.Folder``)
    cancel: threading.Event = field(default_factory=threading.Event)  # Stop's flag, checked by the engine
    busy: int = 0  # how many runs, comparisons or forks of this session stream now
    shown: int | None = None  # how many tokens the browser's strip held when Stop was clicked
    clicks: dict[str, int] = field(default_factory=dict)  # the newest click number seen per clickable view
    _store: Sessions | None = field(default=None, repr=False)
    _key: str = field(default="", repr=False)

    def __setattr__(self, name, value) -> None:
        old = getattr(self, name, None) if name == "evaluation" else None
        object.__setattr__(self, name, value)
        if old is not None and old is not value:
            release(old)  # a folder replaced by another: its unpacked copy goes
        if name in _HOLDS and value is not None and self._store is not None:
            self._store.account(self._key)

    def shown_trace(self) -> RunTrace | None:
        """The run streaming now, or else the trace the Run tab shows."""
        return self.running if self.running is not None else self.trace

    def traces(self) -> list[RunTrace]:
        """Every trace it holds: shown, uploaded, selected, compared, running."""
        held = [self.trace, self.imported, self.running, self.selected[0] if self.selected else None, *self.compare.values()]
        return [t for t in held if isinstance(t, RunTrace)]

    def holdings(self) -> list:
        """What counts in the budget: its traces and its open evaluation folder."""
        return [*self.traces(), *([self.evaluation] if self.evaluation is not None else [])]


class Sessions:
    """The latest run (live or uploaded) and the stop flag of each browser session, bounded in number and in the
    memory their traces take (least recently used first out)."""

    def __init__(self, limit: int = 128, budget_bytes: int | None = None):
        self._data: OrderedDict[str, Session] = OrderedDict()
        self._lock = threading.Lock()
        self.limit = limit
        self.budget_bytes = int(BUDGET_MB * 1e6) if budget_bytes is None else budget_bytes

    def get(self, key: str) -> Session:
        with self._lock:
            entry = self._data.pop(key, None) or Session(_store=self, _key=key)
            self._data[key] = entry
            while len(self._data) > self.limit:
                self._drop(next(iter(self._data)))
            self._evict(keep=key)
            return entry

    def account(self, key: str) -> None:
        """Evict for what session ``key`` now holds (its entry calls this when a trace is stored in it)."""
        with self._lock:
            if key in self._data:
                self._evict(keep=key)

    def kept_bytes(self) -> int:
        """The estimated memory of every trace and evaluation folder the sessions keep (each counted once)."""
        with self._lock:
            return sum(held_bytes(t) for t in self._traces(self._data.values()).values())

    def _evict(self, keep: str) -> None:
        """Drop least recently used sessions (not ``keep``, none streaming) while what they hold exceeds the budget."""
        traces = self._traces(self._data.values())
        total = sum(held_bytes(t) for t in traces.values())
        for key in list(self._data):
            if total <= self.budget_bytes:
                return
            entry = self._data[key]
            if key == keep or entry.busy:
                continue
            self._drop(key)
            left = self._traces(self._data.values())
            total -= sum(held_bytes(t) for i, t in traces.items() if i not in left)
            traces = left

    def _drop(self, key: str) -> None:
        """Forget session ``key``; its evaluation folder's unpacked copy is removed (unless another session holds it)."""
        entry = self._data.pop(key)
        folder = entry.evaluation
        if folder is not None and all(e.evaluation is not folder for e in self._data.values()):
            release(folder)

    def close(self, key: str) -> None:
        """A page closed: its session's evaluation folder is released (the rest goes with the budget)."""
        with self._lock:
            entry = self._data.get(key)
        if entry is not None:
            entry.evaluation = None

    @staticmethod
    def _traces(entries) -> dict[int, Any]:
        """The distinct traces and folders ``entries`` hold (by identity)."""
        return {id(t): t for entry in entries for t in entry.holdings()}

    def latest_click(self, key: str, target: str, seq, **store) -> bool:
        """Whether click ``seq`` on ``target`` is the newest one this session has seen (and, if so, records it and
        ``store``). Gradio replays a deferred event with its *first* event data and runs parallel clicks in any order,
        so the strip numbers its clicks and a handler drops its answer when a newer click has come in meanwhile."""
        with self._lock:
            entry = self._data.get(key)
            if entry is None:
                return True
            if isinstance(seq, int) and seq < entry.clicks.get(target, -1):
                return False
            if isinstance(seq, int):
                entry.clicks[target] = seq
            for name, value in store.items():  # under the lock: the store's budget is checked at the next get
                object.__setattr__(entry, name, value)
            return True

    def trace(self, key: str) -> RunTrace | None:
        """The trace session ``key`` shows: its running run's, or the finished or uploaded one."""
        return self.get(key).shown_trace()


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


def held_bytes(held) -> int:
    """A trace's estimated memory (:func:`trace_bytes`), or what an open evaluation folder holds (its
    ``held_bytes``, set by ``ui.results`` when it opens: its rows in memory and an upload's unpacked files)."""
    return trace_bytes(held) if isinstance(held, RunTrace) else int(getattr(held, "held_bytes", 0))


def release(folder) -> None:
    """Remove an evaluation folder's unpacked copy (an uploaded .zip's ``unpacked``), if it has one."""
    path = getattr(folder, "unpacked", None)
    if path is not None:
        shutil.rmtree(path, ignore_errors=True)


def _length(value) -> int:
    return len(value) if isinstance(value, list) else 0


def _lengths(mapping) -> int:
    return sum(_length(v) for v in mapping.values()) if isinstance(mapping, dict) else 0
