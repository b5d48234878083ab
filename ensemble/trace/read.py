"""Reading an untrusted trace (an upload, an API argument) in a worker thread, with a time limit.

The server's handlers call :func:`read_trace` instead of :meth:`RunTrace.from_json`: the reading runs in one of
two ``trace-read`` threads, so however many traces arrive at once at most two are read at a time, and the caller
waits at most ``ENSEMBLE_LENS_TRACE_READ_S`` seconds (default 20). Past that it gets a one-line refusal and the
reading thread stops at its next checkpoint (``values.checkpoint``, between tokens and rounds). Every step
of the reading is linear in the file's size (``check.scan``) and the sizes are bounded before any record is
built (``values.check_sizes``), so a trace the engine wrote reads in about a second and the limit is only
met by something else; the other clients are served meanwhile.
"""

from __future__ import annotations

import json
import os
import time
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout

from ..errors import TraceFormatError
from . import values as trace_values
from .record import RunTrace

READ_LIMIT_S = float(os.environ.get("ENSEMBLE_LENS_TRACE_READ_S", "20"))
_READERS = ThreadPoolExecutor(max_workers=2, thread_name_prefix="trace-read")


def read_trace(data, limit_s: float | None = None) -> RunTrace:
    """``data`` (a trace as bytes, a JSON string or an already parsed object) as a checked :class:`RunTrace`.

    Raises :class:`TraceFormatError` (one line) when it is not a valid trace or takes longer than ``limit_s``."""
    limit = READ_LIMIT_S if limit_s is None else limit_s
    future = _READERS.submit(_read, data, time.monotonic(), limit)
    try:
        return future.result(timeout=limit + 0.5)
    except FutureTimeout:
        future.cancel()  # not started yet: it never will; started: it stops at its next checkpoint
        raise TraceFormatError(trace_values.time_limit_message(limit)) from None


def _read(data, asked: float, limit: float) -> RunTrace:
    if time.monotonic() - asked > limit:  # it waited its whole time behind other readers
        raise TraceFormatError(trace_values.time_limit_message(limit))
    trace_values.set_deadline(asked + limit, limit)
    try:
        if not isinstance(data, str | bytes):
            try:
                data = json.dumps(data, allow_nan=True)
            except (TypeError, ValueError, RecursionError) as exc:
                raise TraceFormatError(f"The trace is not JSON data ({str(exc)[:120]}).") from exc
        return RunTrace.from_json(data)
    finally:
        trace_values.set_deadline(None)
