"""Members in this process: one after another (:data:`LOCAL`, :data:`SEQUENTIAL`), or at the same time in threads
when every member is on llama.cpp (:data:`THREADS`)."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

from .base import Backend, Pooled, role_threads


class LocalBackend(Backend):
    """Members in this process. transformers members take turns (threads would not help: a forward pass's
    Python side holds the GIL, see ``scripts/safe_pipeline_probe.py``); when every member of a run is on
    llama.cpp, whose passes are C calls without the GIL, the run computes them at the same time in threads
    (:class:`ThreadBackend`)."""

    name = "local"

    def __init__(self, overlap: bool = True):
        self.overlap = overlap  # False: llama.cpp members take turns too (SEQUENTIAL; the bench compares both)

    def for_run(self, runtimes: list, members_at_once: bool = False) -> Backend:
        """Threads when every member is on llama.cpp (its passes release the GIL) and computing at once pays.

        Measured on 2 cores with the three embedded members (``bench --only runtimes``, docs/results.md "Members on
        llama.cpp"): SpecEM in threads 1.54x the speed of members taking turns with every core each, SAFE 0.97x,
        every-token UniTE 0.86x (a second thread speeds a small model's decoding up 1.7x here, so one core each
        at once buys nothing over two cores each in turn, ``scripts/llama_threads_probe.py``; SpecEM's drafts and verifications overlap). So SpecEM
        runs in threads, and so does every method where each member can keep two cores while all compute
        (an extrapolation: not measured on a machine with that many cores), and every run with a member on a server
        (its passes are computed there: a thread here only waits for the answer)."""
        if not self.overlap or len(runtimes) < 2 or not all(r.gil_free for r in runtimes):
            return self
        if members_at_once or any(r.remote for r in runtimes) or (os.cpu_count() or 1) >= 2 * len(runtimes):
            return THREADS
        return self

    def describe(self) -> str:
        return "local (members in this process; llama.cpp members at the same time in threads where that measured faster)"


class ThreadBackend(Pooled, LocalBackend):
    """Members in this process computing at the same time, one thread each (llama.cpp members)."""

    name = "threads"
    parallel = True

    def __init__(self):
        super().__init__()
        self._pool = ThreadPoolExecutor(max_workers=16, thread_name_prefix="member")

    def for_run(self, runtimes: list, members_at_once: bool = False) -> Backend:
        return self

    def member_threads(self, leads_draft: bool, adapters: list, lead) -> list[int | None]:
        return list(role_threads(leads_draft, adapters, lead))

    def describe(self) -> str:
        return "local threads (llama.cpp members in this process, at the same time)"


LOCAL = LocalBackend()
SEQUENTIAL = LocalBackend(overlap=False)
THREADS = ThreadBackend()
