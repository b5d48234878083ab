"""The backend interface, the in-process backend, and the parsing of backend settings."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from ..errors import EnsembleError

T = TypeVar("T")
R = TypeVar("R")

BACKENDS = ("auto", "local", "ray")
BACKEND_ENV = "ENSEMBLE_LENS_BACKEND"


def auto_backend(device: str = "cpu", members: int = 3) -> tuple[str, str]:
    """The backend ``auto`` picks here, and why (printed at startup).

    Measured side by side with ``python -m ensemble bench --only backends``; the figures, and why, are in
    docs/results.md ("Member backends") and docs/distributed.md: on one 2-core machine Ray members were faster
    for SpecEM only and slower for the other methods (a member process gets one core instead of two). With no
    backend faster throughout, ``auto`` is ``local`` on a single machine; Ray is for members that each get their
    own cores or GPU (a cluster: ``--ray-address``, ``--member-resources``)."""
    import os

    if members < 2:
        return "local", "one model: nothing to compute at the same time"
    if os.environ.get("SPACES_ZERO_GPU"):
        return "local", "a ZeroGPU Space runs the models inside its GPU function"
    if device not in (None, "", "cpu"):
        return "local", f"device {device}: one process keeps the models on the GPU"
    return "local", (
        f"{os.cpu_count()} CPU core(s): one process per member measured no faster throughout than members in this process here; "
        "use --backend ray (or ENSEMBLE_LENS_BACKEND=ray) for a cluster or members with cores of their own"
    )


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def interrupt_on_sigterm() -> None:
    """SIGTERM (a service manager's stop, ``kill PID``) ends this process as Ctrl-C does. Python's default ends it at
    once, skipping the exit handlers that stop the member processes it started: Ray's agents outlived the app
    (``tests/test_app_ray.py``). Only the main thread may set a handler; elsewhere this does nothing."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _interrupt)


def role_threads(method: str, adapters: list, lead, cores: int | None = None) -> list[int]:
    """Threads per member of a run whose members compute at the same time on one machine, from their roles: SAFE's
    drafter (its passes are the critical path, the verifiers overlap one another) and a single model get every core,
    each verifier an equal share; UniTE, GaC and SpecEM members all compute at once and share the cores equally."""
    cores = cores or os.cpu_count() or 1
    if method in ("safe", "single") and lead is not None:
        others = max(1, len(adapters) - 1)
        return [cores if adapter is lead else max(1, cores // others) for adapter in adapters]
    return [max(1, cores // len(adapters))] * len(adapters)


class Backend:
    """Where members compute. Subclasses give each member a runtime and say whether work can overlap."""

    name = "base"
    parallel = False  # members' work may overlap (SAFE then drafts ahead while the verifiers verify)
    remote = False  # members compute in other processes (this one then needs no weights)

    def runtime(self, loaded, name: str):
        """A fresh runtime (KV cache and forward passes) of ``loaded`` for one run's member ``name``."""
        raise NotImplementedError

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

    def for_run(self, runtimes: list, method: str = "safe") -> Backend:
        """The backend one run of ``method`` uses, given its members' runtimes (in process: threads where members
        computing at once measured faster than members taking turns, see :meth:`LocalBackend.for_run`)."""
        return self

    def assign(self, method: str, adapters: list, lead) -> None:
        """Tell the runtimes their roles in a run (a process backend gives SAFE's drafter, its critical path,
        more threads than the verifiers). No-op in process."""

    def prepare(self, models: list) -> None:
        """Get ready to run these models (a process backend starts their member processes now, not at the
        first run)."""

    def close(self) -> None:
        """Release what the backend started (processes, clusters)."""


class Pooled:
    """Work of several members at the same time, on a pool of coordinator threads (each waits for its member:
    a Ray actor, or a llama.cpp pass in this process)."""

    _pool: ThreadPoolExecutor

    def submit(self, fn: Callable, items: Iterable) -> Callable[[], list]:
        futures = [self._pool.submit(fn, item) for item in items]
        return lambda: [f.result() for f in futures]

    def map_iter(self, fn: Callable, items: Iterable, before: Callable[[], None] | None = None) -> Iterator:
        futures = []
        for item in items:
            if before is not None:
                before()
            futures.append(self._pool.submit(fn, item))
        try:
            for future in futures:
                yield future.result()
        finally:
            for future in futures:
                future.cancel()


class LocalBackend(Backend):
    """Members in this process. transformers members take turns (threads would not help: a forward pass's
    Python side holds the GIL, see ``scripts/safe_pipeline_probe.py``); when every member of a run is on
    llama.cpp, whose passes are C calls without the GIL, the run computes them at the same time in threads
    (:class:`ThreadBackend`)."""

    name = "local"

    def __init__(self, overlap: bool = True):
        self.overlap = overlap  # False: llama.cpp members take turns too (SEQUENTIAL; the bench compares both)

    def runtime(self, loaded, name: str):
        return loaded.new_runtime()

    def for_run(self, runtimes: list, method: str = "safe") -> Backend:
        """Threads when every member is on llama.cpp (its passes release the GIL) and computing at once pays.

        Measured on 2 cores with the three embedded members (``bench --only runtimes``, docs/results.md "Members on
        llama.cpp"): SpecEM in threads 1.54x the speed of members taking turns with every core each, SAFE 0.97x,
        every-token UniTE 0.86x (a second thread speeds a small model's decoding up 1.7x here, so one core each
        at once buys nothing over two cores each in turn, ``scripts/llama_threads_probe.py``; SpecEM's drafts and verifications overlap). So SpecEM
        runs in threads, and so does every method where each member can keep two cores while all compute
        (an extrapolation: not measured on a machine with that many cores)."""
        if not self.overlap or len(runtimes) < 2 or not all(getattr(r, "gil_free", False) for r in runtimes):
            return self
        if method == "specem" or (os.cpu_count() or 1) >= 2 * len(runtimes):
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

    def for_run(self, runtimes: list, method: str = "safe") -> Backend:
        return self

    def assign(self, method: str, adapters: list, lead) -> None:
        for adapter, threads in zip(adapters, role_threads(method, adapters, lead), strict=True):
            adapter.runtime.threads = threads

    def describe(self) -> str:
        return "local threads (llama.cpp members in this process, at the same time)"


LOCAL = LocalBackend()
SEQUENTIAL = LocalBackend(overlap=False)
THREADS = ThreadBackend()

_lock = threading.Lock()
_shared: dict[tuple, Backend] = {}


def backend_from_env(device: str = "cpu") -> tuple[str, str]:
    """The backend ``ENSEMBLE_LENS_BACKEND`` names (default ``auto``, resolved here) and why: the app's choice."""
    import os

    asked = (os.environ.get(BACKEND_ENV) or "auto").strip()
    if asked not in BACKENDS:
        return "local", f"{BACKEND_ENV}={asked[:40]!r} is not one of {', '.join(BACKENDS)}: using local"
    if asked != "auto":
        return asked, f"set by {BACKEND_ENV}"
    return auto_backend(device)


def make_backend(
    name: str = "local",
    address: str | None = None,
    resources: dict | None = None,
    threads: int | None = None,
    device: str = "cpu",
    members: int = 3,
) -> Backend:
    """The backend called ``name`` (one per process and configuration: actors are reused across runs);
    ``auto``: see :func:`auto_backend`."""
    if name == "auto":
        name = "ray" if address or resources else auto_backend(device, members)[0]
    if name in (None, "", "local"):
        return LOCAL
    if name != "ray":
        raise EnsembleError(f"Unknown backend {name!r}: use {' or '.join(BACKENDS)}.")
    # hashable: each member's resources as sorted pairs (a dict per member made this an "unhashable type" crash)
    key = (name, address, tuple(sorted((m, tuple(sorted(r.items()))) for m, r in (resources or {}).items())), threads)
    with _lock:
        if key not in _shared:
            from .ray_backend import RayBackend

            _shared[key] = RayBackend(address=address, resources=resources, threads=threads)
        return _shared[key]


def close_backends() -> None:
    """Stop every member process this process started (its Ray cluster too). Called as a command or the app ends,
    while the interpreter still runs: left to the exit handlers, a SIGTERMed app left Ray's agents behind
    (``tests/test_app_ray.py``)."""
    with _lock:
        started = list(_shared.values())
        _shared.clear()
    for backend in started:
        backend.close()


def parse_resources(text: str | None) -> dict[str, dict[str, float]]:
    """``qwen=gpu:1,gemma3=cpu:2+node_b:1`` -> {"qwen": {"num_gpus": 1}, "gemma3": {"num_cpus": 2, "node_b": 1}}.

    ``gpu`` and ``cpu`` are Ray's GPU and CPU counts; any other name is a custom resource of the cluster's nodes
    (``ray start --resources '{"node_b": 1}'``), which is how a member is pinned to a host.
    """
    out: dict[str, dict[str, float]] = {}
    if not text:
        return out
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        member, sep, spec = part.partition("=")
        if not sep or not member.strip() or not spec.strip():
            raise EnsembleError(f"Bad member resources {part!r}: use NAME=gpu:1 or NAME=cpu:2+custom:1.")
        wanted: dict[str, float] = {}
        for item in spec.split("+"):
            res, colon, amount = item.partition(":")
            res = res.strip()
            if res.lower() in ("gpu", "cpu"):  # Ray's own counts, however spelt (a custom "CPU" resource is refused)
                res = res.lower()
            try:
                value = float(amount) if colon else 1.0
            except ValueError:
                raise EnsembleError(f"Bad amount {amount!r} in member resources {part!r}.") from None
            if not res or value < 0:
                raise EnsembleError(f"Bad member resources {part!r}: use NAME=gpu:1 or NAME=cpu:2+custom:1.")
            wanted[{"gpu": "num_gpus", "cpu": "num_cpus"}.get(res, res)] = value
        out[member.strip()] = wanted
    return out
