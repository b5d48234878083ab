"""Members in this process: one after another (:data:`LOCAL`, :data:`SEQUENTIAL`), or at the same time in threads
when every member is on llama.cpp (:data:`THREADS`)."""

from __future__ import annotations

import os

from .base import Backend, Pooled, role_threads


class LocalBackend(Backend):
    """Members in this process. transformers members take turns (threads would not help: a forward pass's
    Python side holds the GIL, see ``scripts/safe_pipeline_probe.py``); when every member of a run is on
    llama.cpp, whose passes are C calls without the GIL, the run computes them at the same time in threads
    (:class:`ThreadBackend`)."""

    name = "local"

    def __init__(self, overlap: bool = True):
        self.overlap = overlap  # False: llama.cpp members take turns too (SEQUENTIAL; the bench compares both)

    def for_run(self, runtimes: list) -> Backend:
        """Threads when every member is on llama.cpp (its passes release the GIL) and computing at once pays: when each
        member keeps two cores while all compute, or when the members are servers (their passes are computed there: a
        thread here only waits for the answer). The method does not decide it: SpecEM (every member drafts, then
        every member verifies) was the exception until it was measured again.

        Measured on 2 cores (issue 37, ``python -m ensemble bench --only whole`` and ``--only runtimes``): SpecEM on
        qwen+smollm2 with the members taking turns, every core each, took 0.70x the time of the members in threads with
        one core each (11.7 s against 16.9 s for 128 tokens; qwen's drafting step 34 ms on two threads, 64 ms on one,
        while smollm2, done with its segment after a fifth of the time, left its core idle); SAFE and every-token UniTE
        were no faster in threads either (a second thread speeds a small model's decoding up 1.7x here,
        ``scripts/llama_threads_probe.py``). An earlier measurement had SpecEM in threads 1.54x faster: its turns were
        measured after the threads in one process, when the member threads' OpenMP pools throttled every later pass
        (:class:`~ensemble.members.base.Pooled`). With more cores than two per member (an extrapolation: not measured
        on such a machine) members compute at once."""
        if not self.overlap or len(runtimes) < 2 or not all(r.gil_free for r in runtimes):
            return self
        if any(r.remote for r in runtimes) or (os.cpu_count() or 1) >= 2 * len(runtimes):
            return THREADS
        return self

    def describe(self) -> str:
        return "local (members in this process; llama.cpp members at the same time in threads where that measured faster)"


class ThreadBackend(Pooled, LocalBackend):
    """Members in this process computing at the same time, one thread each (llama.cpp members)."""

    name = "threads"
    parallel = True

    def for_run(self, runtimes: list) -> Backend:
        return self

    def member_threads(self, leads_draft: bool, adapters: list, lead) -> list[int | None]:
        return list(role_threads(leads_draft, adapters, lead))

    def describe(self) -> str:
        return "local threads (llama.cpp members in this process, at the same time)"


LOCAL = LocalBackend()
SEQUENTIAL = LocalBackend(overlap=False)
THREADS = ThreadBackend()
