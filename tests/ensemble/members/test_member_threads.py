"""Where members compute at once, and that their threads end with each call (ensemble.members.base.Pooled)."""

from __future__ import annotations

import os
import threading

import pytest

from ensemble.members.local import LOCAL, SEQUENTIAL, THREADS


class Fake:
    def __init__(self, gil_free=True, remote=False):
        self.gil_free, self.remote = gil_free, remote


def members_alive() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("member")]


@pytest.mark.parametrize("stop", ["consumer", "before"])
def test_member_threads_end_even_when_the_work_stops_early(stop):
    gate = threading.Event()

    def work(x):
        gate.wait(5)
        return x

    def before():
        if stop == "before" and len(seen) == 1:
            raise RuntimeError("Stop")
        seen.append(1)

    seen = []
    results = THREADS.map_iter(work, [1, 2, 3], before=before)
    if stop == "consumer":
        gate.set()
        assert next(results) == 1
        results.close()  # the consumer leaves after the first member's result
    else:
        with pytest.raises(RuntimeError, match="Stop"):
            next(results)
        gate.set()
    for thread in threading.enumerate():
        if thread.name.startswith("member"):
            thread.join(5)
    assert not members_alive()
    assert THREADS.submit(lambda x: x * 2, [1, 2])() == [2, 4]
    assert not members_alive()  # submit's threads are joined once its results are taken


def test_members_compute_at_once_only_with_two_cores_each_or_on_servers():
    cores = os.cpu_count() or 1
    assert LOCAL.for_run([Fake(), Fake()]) is (THREADS if cores >= 4 else LOCAL)
    assert LOCAL.for_run([Fake(), Fake(), Fake()]) is (THREADS if cores >= 6 else LOCAL)
    assert LOCAL.for_run([Fake(remote=True), Fake(remote=True)]) is THREADS  # a thread here only waits
    assert LOCAL.for_run([Fake(), Fake(gil_free=False)]) is LOCAL  # a transformers member holds the GIL
    assert LOCAL.for_run([Fake()]) is LOCAL
    assert SEQUENTIAL.for_run([Fake(remote=True), Fake(remote=True)]) is SEQUENTIAL
