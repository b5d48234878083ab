"""Members as Ray actors: each member's model and KV caches live in its own process, placed by Ray.

Locally ``ray.init()`` starts a one-node cluster (one process per member on this machine); with an address
(``ray.init(address="ray://head:10001")`` or ``auto``) the actors go to the cluster's nodes, placed by the
resources asked for each member (``num_gpus``, a custom resource per host). The coordinator keeps every
member's text side (tokens, spans, re-sync) and sends an actor only ids and positions; the actor
(:class:`~ensemble.members.ray.actor.MemberActor`, the member's side) answers with row summaries, the numbers of
the ids asked for or, for sampled runs, whole rows, and what the pass cost. This module is the coordinator's side.

One actor serves every run that uses its model: each run is a *session* with its own KV cache, so two app
sessions never share KV state. An actor that dies (its process killed, out of memory) fails the runs using it
with :class:`~ensemble.errors.MemberDied`; the next run starts a new actor.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import pickle
import signal
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from functools import cache
from pathlib import Path

import torch

from ...errors import Cancelled, EnsembleError, MemberDied
from ...models.runtimes import runtime_info
from ...tokens.distribution import FullDist, SizedDist
from ...tokens.response import common_prefix
from ..base import Backend, Pooled, role_threads
from ..runtime import ForwardStats, Runtime
from .actor import MemberActor, _prefix_check

WAIT_STEP_S = 0.05
"""How often a waiting coordinator thread checks the run's Stop flag while an actor computes."""
SHARED_CORES_ENV = {"OMP_WAIT_POLICY": "PASSIVE"}
"""The environment of member processes that share one machine's cores (no cluster named), unless the user set it.
llama.cpp computes on OpenMP, whose threads spin a while at every barrier by default: the fastest for a process
that has the cores to itself, but where a drafter's threads and a verifier's overlap on the same cores they spin
against each other. ``python scripts/omp_wait_probe.py`` (Ray members, qwen + smollm2, one GSM8K question, 128
tokens, 2 cores), seconds per token with OpenMP's default and with ``PASSIVE``: qwen alone 0.032 and 0.056, SAFE
0.091 and 0.064, every-token UniTE 0.068 and 0.056. Members share a machine to run ensembles, so they sleep at
once; on a cluster each member keeps the default."""

@cache
def _actor_class():
    import ray

    return ray.remote(concurrency_groups={"control": 1})(MemberActor)


class _Member:
    """A started actor and what is known about it."""

    def __init__(self, actor, info: dict, label: str):
        self.actor, self.info, self.label = actor, info, label
        self.dead = False


class RemoteModel(Runtime):
    """The :class:`~ensemble.members.runtime.Runtime` of a member process: an actor session, with what keeps
    messages small: ``dists`` (row summaries, other ids on request), ``draft_greedy`` (a whole greedy draft in one
    call). It mirrors the ids the actor's cache holds, so each call sends only the new ids, and a repeated question
    (the row after the ids just computed) is answered without a round trip, exactly where the in-process cache
    answers without a forward pass. Its passes' threads are its policy's (None: the actor's own)."""

    remote = True

    def __init__(self, backend: RayBackend, member: _Member):
        self.backend, self.member = backend, member
        self.session = uuid.uuid4().hex
        self.device = torch.device("cpu")
        self.stats = ForwardStats()
        self._ids: list[int] = []  # the ids the actor's cache holds
        self._last: tuple | None = None  # (ids, the Dist or row after them)

    @property
    def cache_ids(self) -> list[int]:
        return self._ids

    def check_cancel(self) -> None:
        cancel = self.policy.cancel
        if cancel is not None and cancel.is_set():
            if not self.member.dead:
                with contextlib.suppress(Exception):  # stop the actor's multi-pass call after its current pass
                    self.member.actor.cancel.remote(self.session)
            raise Cancelled("Stopped by the user.")

    def _call(self, method: str, *args):
        import ray

        self.check_cancel()
        if self.member.dead:
            raise MemberDied(self.member.label, self.member.info.get("pid"))
        self.stats.bytes += len(pickle.dumps(args, protocol=5))  # what this call sends
        try:
            ref = getattr(self.member.actor, method).remote(self.session, *args)
            while True:
                done, _ = ray.wait([ref], timeout=WAIT_STEP_S)
                if done:
                    result = ray.get(done[0])
                    break
                self.check_cancel()  # Stop: stop waiting now; the actor ends the call after the pass in flight
        except ray.exceptions.RayActorError as exc:
            self.member.dead = True
            raise MemberDied(self.member.label, self.member.info.get("pid")) from exc
        except ray.exceptions.RayTaskError as exc:
            cause = exc.as_instanceof_cause()
            raise (cause if isinstance(cause, EnsembleError) else EnsembleError(f"Member {self.member.label}: {exc}")) from None
        self.stats.bytes += len(pickle.dumps(result, protocol=5))  # and what it receives
        return result

    def _count(self, cost) -> None:
        passes, tokens, seconds = cost
        self.stats.passes += passes
        self.stats.tokens += tokens
        self.stats.seconds += seconds

    def _delta(self, ids: list[int]) -> tuple[int, int, list[int]]:
        keep = common_prefix(self.cache_ids, ids)
        return keep, _prefix_check(ids, keep), ids[keep:]

    def _sized(self, summary, handle: int, index: int, size: int) -> SizedDist:
        return SizedDist(
            summary,
            lambda ids: self._call("values", handle, index, ids),
            lambda: torch.from_numpy(self._call("row", handle, index).copy()),
            size,
        )

    def _ask(self, ids: list[int], positions: list[int], size: int | None):
        last = len(ids) - 1
        if positions == [last] and self._last is not None and self._last[0] == ids and (size is None) == self._last[2]:
            return [self._last[1]]
        how = None if size is None else (size, self.policy.rows_kept)
        payload, handle, cost = self._call("rows", *self._delta(ids), positions, self.threads, how)
        self._count(cost)
        self._ids = ids
        if size is None:
            out = [torch.from_numpy(r.copy()) for r in payload]
            self.stats.row_bytes += sum(r.nbytes for r in payload)
        else:
            out = [self._sized(summary, handle, i, size) for i, summary in enumerate(payload)]
            self.stats.row_bytes += sum(4 * summary.vocab for summary in payload)
        self._last = (ids, out[-1], size is None) if positions[-1] == last else None
        return out

    def rows(self, ids, positions) -> torch.Tensor:
        """Whole rows (sampled runs; tests)."""
        return torch.stack(self._ask(list(ids), list(positions), None))

    def dists(self, ids, positions) -> list:
        """The distributions after ``positions`` of ``ids``: summaries (the policy's ``full_rows``: whole rows,
        read in process)."""
        size = self.policy.summary_size
        if self.policy.full_rows:
            return [FullDist(r, size) for r in self._ask(list(ids), list(positions), None)]
        return self._ask(list(ids), list(positions), size)

    def draft_greedy(self, ids: list[int], n: int, stop: set[int]) -> list[tuple[int, SizedDist]]:
        """Up to ``n`` greedy tokens after ``ids`` drafted in the member in one call, each with its distribution;
        a token of ``stop`` ends the draft (returned, not appended)."""
        ids, size = list(ids), self.policy.summary_size
        tokens, summaries, handles, cost = self._call("draft", *self._delta(ids), n, sorted(stop), self.threads, (size, self.policy.rows_kept))
        self._count(cost)
        self.stats.row_bytes += sum(4 * summary.vocab for summary in summaries)
        dists = [self._sized(summary, h, 0, size) for summary, h in zip(summaries, handles, strict=True)]
        self._ids = ids + tokens[:-1]
        self._last = (self._ids, dists[-1], False) if tokens else None
        return list(zip(tokens, dists, strict=True))

    def branch_scores(self, ctx: int, blocks: list[list[int]], targets: list[int]) -> torch.Tensor:
        array, _, cost = self._call("branch", ctx, blocks, targets, self.threads)
        self._count(cost)
        return torch.from_numpy(array.copy())

    def crop(self, keep: int) -> None:
        """Keep the first ``keep`` ids: the next call tells the actor to cut its cache back there."""
        if keep < len(self._ids):
            self._ids, self._last = self._ids[:keep], None

    def drop(self) -> None:
        self._ids, self._last = [], None
        if not self.member.dead:
            self.member.actor.drop.remote(self.session)

    def close(self) -> None:
        """Free the session's KV cache and rows in the actor (a run's end)."""
        if not self.member.dead:
            with contextlib.suppress(Exception):  # the actor is gone or Ray is shutting down: nothing to free
                self.member.actor.close.remote(self.session)


def actor_options(resources: dict, name: str) -> dict:
    """Ray's ``.options()`` for member ``name``'s actor from ``--member-resources`` (:func:`parse_resources`):
    CPU and GPU counts as Ray's own arguments, any other name as a custom resource; a member not named asks for
    none (it shares what is free)."""
    asked = dict(resources.get(name, {}))
    return {"num_cpus": asked.pop("num_cpus", 0), "num_gpus": asked.pop("num_gpus", 0), "resources": asked}


class RayBackend(Pooled, Backend):
    """One Ray actor per model, started on first use and reused by later runs.

    Args:
        address: a Ray cluster to join (``auto``, ``ray://host:10001``); None starts a local one.
        resources: per member name, Ray resources for its actor (``{"qwen": {"num_gpus": 1}}``); members not
            named ask for nothing, so every member fits on a small machine.
        threads: torch threads per actor (default: this machine's cores shared among the members).
    """

    name = "ray"
    parallel = True
    remote = True

    def __init__(self, address: str | None = None, resources: dict | None = None, threads: int | None = None):
        try:
            import ray  # noqa: F401
        except ImportError:
            raise EnsembleError("The ray backend needs the 'ray' package: pip install ray==2.60.0.") from None
        self.address, self.resources, self.threads = address, dict(resources or {}), threads
        self._members: dict[object, _Member] = {}
        self._starting: dict[object, threading.Lock] = {}
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=16, thread_name_prefix="ray-start")  # starts actors only
        self._started_ray = False
        atexit.register(self.close)

    # -- Ray and actors --------------------------------------------------------------------------------------
    def _ensure_ray(self) -> None:
        import ray

        if ray.is_initialized():
            return
        # Workers import this package from where the coordinator has it (a cluster's nodes need it at the same
        # path, e.g. a shared folder, or installed: docs/distributed.md).
        root = str(Path(__file__).resolve().parents[3])
        path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)
        env = {"PYTHONPATH": path}
        if not self.address:  # members share this machine's cores
            env.update({k: v for k, v in SHARED_CORES_ENV.items() if k not in os.environ})
        kwargs = dict(include_dashboard=False, logging_level="ERROR", log_to_driver=False, runtime_env={"env_vars": env})
        main = threading.current_thread() is threading.main_thread()
        ours = signal.getsignal(signal.SIGTERM) if main else None
        if self.address:
            ray.init(address=self.address, **kwargs)
        else:
            ray.init(num_cpus=os.cpu_count() or 1, **kwargs)
            self._started_ray = True
        if main and callable(ours):  # Ray's driver sets SIGTERM to sys.exit(15): keep a handler this process set
            signal.signal(signal.SIGTERM, ours)  # (with none, Ray's exit runs the exit handlers; the default would not)

    def _how(self, loaded) -> dict:
        """How the member process gets its model: loaded by the same name and device (the dtype this process
        holds, so both backends compute alike; a weightless coordinator passes the dtype asked for, which the
        member's own node resolves), or the in-memory model itself (pickled: tests' small models)."""
        if loaded.load_args:
            name, device, dtype, runtime = loaded.load_args
            if loaded.has_weights and runtime_info(runtime).tensors:  # a torch module: the dtype of its tensors
                dtype = str(next(loaded.model.parameters()).dtype).removeprefix("torch.")
            return {"kind": "load", "name": name, "device": device, "dtype": dtype, "runtime": runtime}
        return {"kind": "object", "model": loaded.model, "device": loaded.device}

    def _threads(self) -> int | None:
        """Threads an actor starts with: as asked; on a cluster its node's default (None); on this machine a share
        of its cores (each run then sets them by the members' roles, :meth:`member_threads`)."""
        if self.threads or self.address:
            return self.threads
        return max(1, (os.cpu_count() or 1) // 3)

    def member(self, loaded) -> _Member:
        """The live actor of ``loaded``, started (or restarted after a death) when needed."""
        import ray

        key = loaded.load_args or id(loaded.model)
        with self._lock:
            self._ensure_ray()
            lock = self._starting.setdefault(key, threading.Lock())
        with lock:  # one start per model; different models start (and load) at the same time
            found = self._members.get(key)
            if found is not None and not found.dead:
                return found
            actor = _actor_class().options(**actor_options(self.resources, loaded.name)).remote(self._how(loaded), self._threads())
            try:
                info = ray.get(actor.ready.remote())
            except ray.exceptions.RayActorError as exc:
                raise EnsembleError(f"Member {loaded.name} could not start: {exc}") from exc
            found = self._members[key] = _Member(actor, info, loaded.name)
            return found

    def member_threads(self, leads_draft: bool, adapters: list, lead) -> list[int | None]:
        """On this machine the members' threads follow their roles (:func:`~ensemble.members.base.role_threads`:
        SAFE's drafter every core, the others a share); ``--member-threads`` fixes them, and on a cluster each member
        keeps its own node's (None: the actor's own)."""
        if self.threads or self.address:
            return [None] * len(adapters)
        return [t if a.runtime.remote else None for a, t in zip(adapters, role_threads(leads_draft, adapters, lead), strict=True)]

    def prepare(self, models: list) -> list[str]:
        """Start the members' processes now, at the same time (each loads its model and, on llama.cpp, reads its
        template head into its first context), not at the first run."""
        import ray

        started = list(self._pool.map(self.member, models))
        try:
            ray.get([m.actor.warm.remote() for m in started])
        except ray.exceptions.RayError as exc:
            raise EnsembleError(f"A member could not prepare its first context: {exc}") from exc
        return []

    def session(self, loaded) -> RemoteModel:
        return RemoteModel(self, self.member(loaded))

    def member_info(self) -> dict[str, dict]:
        """Label -> {pid, node, threads} of the live actors (for the app's status and the fault tests)."""
        with self._lock:
            return {m.label: dict(m.info) for m in self._members.values() if not m.dead}

    def describe(self) -> str:
        where = self.address or "this machine"
        return f"ray ({where}, {len(self.member_info())} member process(es))"

    def close(self) -> None:
        import ray

        with self._lock:
            for m in self._members.values():
                with contextlib.suppress(Exception):  # already gone
                    ray.kill(m.actor)
            self._members.clear()
        if self._started_ray and ray.is_initialized():
            ray.shutdown()
            self._started_ray = False
