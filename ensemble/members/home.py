"""The engine's home thread: one long-lived thread where a server process (the app, ``ensemble serve``) computes its
runs, whichever threads its front end advances them from.

Why: llama.cpp's CPU kernels and torch's large ops run on OpenMP, and every thread that runs OpenMP work keeps a
pool of OpenMP threads while it lives. Once the process's pools hold more threads than the machine has cores,
libgomp "throttles": every barrier of every pool sleeps instead of spinning. The app warmed its models in its main
thread and Gradio advances a streaming handler from its worker threads: measured on this project's 2-core machine
(``python scripts/omp_pools_probe.py``), qwen alone on llama.cpp decoded 38.7 ms a token from the main thread and
60.6 ms in the app, in every run of the process. Advanced here (:func:`homed`), every step of every run computes in
this one thread, and so does the warming (:func:`on_home`); 39.8 ms.

Runs of several visitors take turns here step by step (a step is at most one round). Model loading stays in the
caller's thread (a hub download would hold every visitor's run), and so does closing an abandoned run's iterator: it
is handed to this thread and not waited for (Gradio closes it on its event loop, which must not wait for another
visitor's step). The thread is a daemon (an interrupted start is not waited for) and is made again in a forked child
(ZeroGPU runs a handler in a fork of the process). A command-line process computes in its main thread and needs none
of this; :class:`~ensemble.members.base.Pooled` members' threads end with each call for the same reason.
"""

from __future__ import annotations

import contextvars
import os
import queue
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from typing import TypeVar

T = TypeVar("T")


class _Home:
    """A daemon thread that runs submitted calls one after another."""

    def __init__(self):
        self.jobs: queue.SimpleQueue = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._serve, name="engine-home", daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            future, fn, args, kwargs = self.jobs.get()
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn(*args, **kwargs))
            except BaseException as exc:  # noqa: BLE001 - handed to the caller, whatever it is
                future.set_exception(exc)

    def submit(self, fn: Callable, *args, **kwargs) -> Future:
        future: Future = Future()
        self.jobs.put((future, contextvars.copy_context().run, (fn, *args), kwargs))
        return future


_home: _Home | None = None
_lock = threading.Lock()


def _the_home() -> _Home:
    global _home
    with _lock:
        if _home is None:
            _home = _Home()
        return _home


def _forget_after_fork() -> None:
    """A forked child has no home thread (only the forking thread survives a fork): the next call makes one."""
    global _home, _lock
    _home, _lock = None, threading.Lock()


os.register_at_fork(after_in_child=_forget_after_fork)


def at_home() -> bool:
    """Whether the calling thread is the home thread."""
    return _home is not None and threading.current_thread() is _home.thread


def on_home(fn: Callable[..., T], *args, **kwargs) -> T:
    """``fn(*args, **kwargs)`` computed in the home thread (directly when called from it), in a copy of the caller's
    context variables (Gradio finds a handler's progress bar through them); its exception is raised here."""
    if at_home():
        return fn(*args, **kwargs)
    return _the_home().submit(fn, *args, **kwargs).result()


_DONE = object()


def _step(iterator: Iterator):
    try:
        return next(iterator)
    except StopIteration:
        return _DONE


def homed(iterator: Iterator[T]) -> Iterator[T]:
    """``iterator`` advanced in the home thread, one item per ``next`` in lockstep (it computes nothing ahead of
    its consumer, as a plain generator would not). Closing this hands closing it to the home thread, after the step
    in flight, without waiting. A generator's return value is not passed on (the engine's runs return none)."""
    finished = False
    try:
        while True:
            item = on_home(_step, iterator)
            if item is _DONE:
                finished = True
                return
            yield item
    finally:
        close = getattr(iterator, "close", None)
        if not finished and close is not None:
            if at_home():
                close()
            else:
                _the_home().submit(close)
