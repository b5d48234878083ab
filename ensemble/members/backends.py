"""Which backend: the names (``local``, ``ray``, ``auto``) and what ``auto`` picks, the one backend per process and
configuration, member resources as flags give them, getting members ready before a run, and stopping what was
started."""

from __future__ import annotations

import signal
import threading

from ..errors import EnsembleError
from .base import Backend
from .local import LOCAL

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
    (``tests/ui/test_app_ray.py``). Only the main thread may set a handler; elsewhere this does nothing."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _interrupt)


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
            from .ray import RayBackend

            _shared[key] = RayBackend(address=address, resources=resources, threads=threads)
        return _shared[key]


def warm(pool, names: list[str], backend: Backend = LOCAL) -> list[str]:
    """Load these models into ``pool`` and get their members ready on ``backend`` before any run (each llama.cpp
    model's first context, here or in its member process); returns what could not be done, one message each,
    instead of raising (a server keeps serving)."""
    problems = pool.warm(names)
    ready = [pool.get(name) for name in names if name not in pool.unavailable]
    try:
        problems += backend.prepare(ready)
    except EnsembleError as exc:
        problems.append(f"member processes did not start: {exc}")
    return problems


def close_backends() -> None:
    """Stop every member process this process started (its Ray cluster too). Called as a command or the app ends,
    while the interpreter still runs: left to the exit handlers, a SIGTERMed app left Ray's agents behind
    (``tests/ui/test_app_ray.py``)."""
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
