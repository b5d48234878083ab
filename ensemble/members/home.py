"""The engine's home thread: one long-lived thread where a server process (the app, ``ensemble serve``) computes its
runs, whichever threads its front end advances them from.

Why: llama.cpp's CPU kernels and torch's large ops run on OpenMP, and every thread that runs OpenMP work keeps a
pool of OpenMP threads while it lives. Once the process's pools hold more threads than the machine has cores,
libgomp "throttles": every barrier of every pool sleeps instead of spinning. Gradio advances a streaming handler
from whichever of its worker threads is free, so each step of a run could run in another thread, each left with a
pool: measured on this project's 2-core machine (``python scripts/omp_pools_probe.py``), qwen alone on llama.cpp
decoded 42 ms a token advanced from one thread and 60 ms advanced from a pool of threads, and stayed at 60 ms in
every later run of the process. Advanced here, every step of every run computes in this one thread, and so do the
models' loading (the transformers runtime de-quantizes with torch) and warming.

A command-line process computes in its main thread and needs none of this. :class:`~ensemble.members.base.Pooled`
members' threads end with each call for the same reason.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")

_HOME = ThreadPoolExecutor(max_workers=1, thread_name_prefix="engine-home")
_IDENT: list[int] = []


def _ident() -> int:
    if not _IDENT:
        _IDENT.append(_HOME.submit(threading.get_ident).result())
    return _IDENT[0]


def at_home() -> bool:
    """Whether the calling thread is the home thread."""
    return threading.get_ident() == _ident()


def on_home(fn: Callable[..., T], *args, **kwargs) -> T:
    """``fn(*args, **kwargs)`` computed in the home thread (directly when called from it), in a copy of the caller's
    context variables (Gradio finds a handler's progress bar through them); its exception is raised here."""
    if at_home():
        return fn(*args, **kwargs)
    return _HOME.submit(contextvars.copy_context().run, fn, *args, **kwargs).result()


_DONE = object()


def _step(iterator: Iterator):
    try:
        return next(iterator)
    except StopIteration:
        return _DONE


def homed(iterator: Iterator[T]) -> Iterator[T]:
    """``iterator`` advanced in the home thread, one item per ``next`` in lockstep (it computes nothing ahead of
    its consumer, as a plain generator would not); closing this closes it there too. Runs of several visitors take
    turns in the home thread, step by step."""
    finished = False
    try:
        while True:
            item = on_home(_step, iterator)
            if item is _DONE:
                finished = True
                return
            yield item
    finally:
        if not finished:
            close = getattr(iterator, "close", None)
            if close is not None:
                on_home(close)
