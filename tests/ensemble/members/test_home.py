"""The home thread (ensemble.members.home): a server's runs compute in one thread, whichever threads advance them."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from ensemble.members.home import at_home, homed, on_home


def test_every_step_computes_in_one_thread_whichever_thread_asks():
    seen = []

    def steps():
        for i in range(12):
            seen.append(threading.get_ident())
            yield i

    events = homed(steps())
    with ThreadPoolExecutor(4) as askers:  # as Gradio advances a streaming handler: from whichever worker is free
        got = [askers.submit(next, events).result() for _ in range(12)]
        asked_from = {f.result() for f in [askers.submit(threading.get_ident) for _ in range(8)]}
    assert got == list(range(12))
    assert len(set(seen)) == 1 and seen[0] == on_home(threading.get_ident)
    assert seen[0] not in asked_from and seen[0] != threading.get_ident()
    with pytest.raises(StopIteration):
        next(events)


def test_nothing_is_computed_ahead_of_the_consumer():
    made = []

    def steps():
        for i in range(5):
            made.append(i)
            yield i

    events = homed(steps())
    assert next(events) == 0 and next(events) == 1
    assert made == [0, 1]  # lockstep, as the plain generator: a Stop between two steps leaves the rest undone


def test_an_error_is_raised_in_the_consumer_and_closing_closes_the_run_there():
    closed = []

    def failing():
        yield 1
        raise ValueError("member failed")

    events = homed(failing())
    assert next(events) == 1
    with pytest.raises(ValueError, match="member failed"):
        next(events)

    def run():
        try:
            yield 1
            yield 2
        finally:
            closed.append(at_home())  # its finally (the run's KV caches freed) runs in the home thread

    events = homed(run())
    assert next(events) == 1
    events.close()
    on_home(lambda: None)  # the close was handed to the home thread, in order: done once a later call is
    assert closed == [True]


def test_closing_does_not_wait_for_the_home_thread():
    """Gradio closes an abandoned run's iterator on its event loop: that must not wait for another visitor's step."""
    release = threading.Event()

    def run():
        yield 1
        yield 2

    events = homed(run())
    assert next(events) == 1
    busy = threading.Thread(target=on_home, args=(release.wait,))  # another run's long step holds the home thread
    busy.start()
    try:
        done = threading.Event()
        closer = threading.Thread(target=lambda: (events.close(), done.set()))
        closer.start()
        assert done.wait(5)  # returned while the home thread was still busy
    finally:
        release.set()
        busy.join()


def test_a_forked_child_gets_its_own_home_thread():
    """ZeroGPU runs a handler in a fork of the process: the parent's home thread does not exist there."""
    import os

    on_home(lambda: None)  # the parent has a home thread
    pid = os.fork()
    if pid == 0:  # the child: only the forking thread survived; on_home must make a home, not wait forever
        import signal

        ok = False
        signal.alarm(10)  # a home that never answers ends the child instead of hanging the test
        try:
            ok = on_home(at_home) is True
        finally:
            os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_on_home_from_the_home_thread_runs_in_place():
    assert on_home(lambda: on_home(at_home)) is True


def test_on_home_sees_the_callers_context_variables():
    import contextvars

    where = contextvars.ContextVar("where", default="unset")
    where.set("a Gradio handler")  # Gradio finds a handler's progress bar through context variables
    assert on_home(where.get) == "a Gradio handler"
    assert on_home(at_home) is True
