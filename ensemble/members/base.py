"""The backend interface: where members compute (:class:`Backend`), work of several members at the same time
(:class:`Pooled`), and the threads a member's role in a run gives it (:func:`role_threads`)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from ..errors import EnsembleError

T = TypeVar("T")
R = TypeVar("R")

def role_threads(leads_draft: bool, adapters: list, lead, cores: int | None = None) -> list[int]:
    """Threads per member of a run whose members compute at the same time on one machine, from their roles: SAFE's
    drafter (its passes are the critical path, the verifiers overlap one another) and a single model get every core,
    each verifier an equal share; UniTE, GaC and SpecEM members all compute at once and share the cores equally."""
    cores = cores or os.cpu_count() or 1
    if leads_draft and lead is not None:
        others = max(1, len(adapters) - 1)
        return [cores if adapter is lead else max(1, cores // others) for adapter in adapters]
    return [max(1, cores // len(adapters))] * len(adapters)


class Backend:
    """Where members compute. Subclasses give each member a runtime and say whether work can overlap."""

    name = "base"
    parallel = False  # members' work may overlap (SAFE then drafts ahead while the verifiers verify)
    remote = False  # members compute in other processes (this one then needs no weights; runtimes: session())

    def session(self, loaded):
        """A process backend's runtime of ``loaded`` for one run (built through :func:`.factory.new_runtime`)."""
        raise NotImplementedError(f"the {self.name} backend computes members in this process")

    def map(self, fn: Callable[[T], R], items: Iterable[T]) -> list[R]:
        """``[fn(x) for x in items]``, possibly at the same time; results in input order."""
        return list(self.map_iter(fn, items))

    def submit(self, fn: Callable[[T], R], items: Iterable[T]) -> Callable[[], list[R]]:
        """Start ``fn`` over ``items`` and return a function that waits for the results (in input order). In
        process the work is done here, before this returns; a process backend returns at once, so the caller
        can work meanwhile (SAFE drafts the next round while the verifiers verify)."""
        results = self.map(fn, items)
        return lambda: results

    def map_iter(self, fn: Callable[[T], R], items: Iterable[T], before: Callable[[], None] | None = None) -> Iterator[R]:
        """Results of ``fn`` over ``items`` in input order, each as soon as it and those before it are done.
        ``before`` runs before each item is started (the run's cancel check)."""
        for item in items:
            if before is not None:
                before()
            yield fn(item)

    def describe(self) -> str:
        return self.name

    def for_run(self, runtimes: list) -> Backend:
        """The backend one run uses, given its members' runtimes (in process: threads where members computing at
        once measured faster than members taking turns, see :meth:`LocalBackend.for_run`)."""
        return self

    def member_threads(self, leads_draft: bool, adapters: list, lead) -> list[int | None]:
        """Threads of each member's passes in a run, from their roles (members computing at the same time give
        SAFE's drafter, its critical path, more than the verifiers); None: the runtime's own default."""
        return [None] * len(adapters)

    def prepare(self, models: list) -> list[str]:
        """Get ready to run these models before any run: each llama.cpp model's first context with its template
        head read (a process backend starts their member processes now, not at the first run). Returns what could
        not be done, one message each."""
        from .factory import warm_runtime

        problems = []
        for model in models:
            try:
                warm_runtime(model)
            except EnsembleError as exc:
                problems.append(f"{model.name}: its first context could not be prepared: {exc}")
        return problems

    def close(self) -> None:
        """Release what the backend started (processes, clusters)."""


class Pooled:
    """Work of several members at the same time, on coordinator threads that live for one call (each waits for its
    member: a Ray actor, or a llama.cpp pass in this process).

    The threads end with the call on purpose. Every thread that runs OpenMP work (a llama.cpp pass on two or more
    threads, a large torch op) keeps an OpenMP pool while it lives, and once the process's pools hold more threads
    than the machine has cores, libgomp "throttles": every barrier sleeps instead of spinning, for every pool, the
    calling thread's too. Measured on this project's 2-core machine (``scripts/omp_pools_probe.py``): qwen's
    decoding step on llama.cpp 35 ms, 55-60 ms while a thread that once ran a torch op or a pass lives beside it.
    A persistent pool of member threads made every run after the first SpecEM run of a process 1.5x slower
    (the bench's later rows, the app)."""

    @staticmethod
    def _workers(items: list) -> ThreadPoolExecutor:
        return ThreadPoolExecutor(max_workers=max(1, len(items)), thread_name_prefix="member")

    def submit(self, fn: Callable, items: Iterable) -> Callable[[], list]:
        items = list(items)
        pool = self._workers(items)
        futures = [pool.submit(fn, item) for item in items]

        def wait() -> list:
            try:
                return [f.result() for f in futures]
            finally:
                pool.shutdown(wait=True)

        return wait

    def map_iter(self, fn: Callable, items: Iterable, before: Callable[[], None] | None = None) -> Iterator:
        items = list(items)
        pool = self._workers(items)
        futures, done = [], False
        try:
            for item in items:
                if before is not None:
                    before()
                futures.append(pool.submit(fn, item))
            for future in futures:
                yield future.result()
            done = True
        finally:  # every job done: the threads are joined; else (a Stop) a job still running ends on its own
            pool.shutdown(wait=done, cancel_futures=True)
