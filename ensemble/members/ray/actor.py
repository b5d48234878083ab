"""The member side of the Ray backend: what runs inside a member's process (one Ray actor per model).

A :class:`MemberActor` owns one loaded model and a *session* per run (its own KV cache and the rows of its latest
passes), answers the coordinator's calls (:class:`~ensemble.members.ray.backend.RemoteModel`) with row summaries,
the numbers of given ids, whole rows or greedy drafts, and stops a session's multi-pass call when its run is
stopped. It needs Ray only to name its node; :func:`~ensemble.members.ray.backend._actor_class` makes it an actor.
"""

from __future__ import annotations

import os
import threading
import zlib
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np
import torch

from ...errors import Cancelled, EnsembleError
from ...tokens.distribution import RowMath
from ..factory import new_runtime
from ..runtime import ForwardStats, RunPolicy

KEEP_BYTES = 1 << 30
"""A session keeps the rows of the passes its run may still ask about (the run says how many: ``rows_kept``), and
never more than this many bytes of them (the newest pass is always kept)."""


def _prefix_check(ids: list[int], keep: int) -> int:
    """A checksum of the first ``keep`` ids, so a member never extends a prefix other than the coordinator's."""
    return zlib.crc32(np.asarray(ids[:keep], dtype=np.int64).tobytes())


@dataclass(frozen=True)
class InMemory:
    """A transformers model handed to the member as an object (tests' small models), as :func:`new_runtime` reads it."""

    model: object
    device: str
    runtime: str = "transformers"


class _Session:
    """One run's state in a member: its runtime (KV cache) and the rows of its latest passes, by handle."""

    def __init__(self, model):
        self.model = model
        self.cancel = threading.Event()
        self.stopped_at: int | None = None  # passes when a Stop arrived
        model.configure(RunPolicy(cancel=self.cancel))
        self.kept: OrderedDict[int, list[RowMath]] = OrderedDict()
        self.bytes = 0
        self.handles = 0

    def ids(self, keep: int, check: int, tail: list[int]) -> list[int]:
        """The ids the coordinator means: the first ``keep`` of those the cache holds, then ``tail``."""
        held = list(self.model.cache_ids)
        if keep > len(held) or _prefix_check(held, keep) != check:
            raise EnsembleError("A member's KV cache no longer holds the ids its coordinator extends (a member restarted?).")
        return held[:keep] + list(tail)

    def keep(self, rows: torch.Tensor, passes: int) -> int:
        """Keep a pass's rows under a new handle, and those of the ``passes`` - 1 passes before it."""
        handle, self.handles = self.handles, self.handles + 1
        self.kept[handle] = [RowMath(r) for r in rows]
        self.bytes += rows.nbytes
        while len(self.kept) > 1 and (len(self.kept) > passes or self.bytes > KEEP_BYTES):
            _, old = self.kept.popitem(last=False)
            self.bytes -= sum(m.row.nbytes for m in old)
        return handle

    def row(self, handle: int, index: int) -> RowMath:
        found = self.kept.get(handle)
        if found is None:
            raise EnsembleError(f"A member no longer holds the rows of pass {handle} (it keeps those its run said it needs).")
        return found[index]


class MemberActor:
    """The process side of a member: one model, one :class:`_Session` (KV cache and recent rows) per run.

    A call sends the ids as a delta (how many of the ids the session's cache holds it keeps, a checksum of them,
    and the new ids) and gets back, per asked position, a row's :class:`~ensemble.tokens.distribution.Summary` (``size`` given)
    or the whole row (``size`` None: sampled runs); other ids' numbers come from :meth:`values`. ``cancel`` runs
    beside the compute calls (its own concurrency group), so a Stop ends a multi-pass call after its current pass.
    """

    def __init__(self, how: dict, threads: int | None):
        if threads:
            torch.set_num_threads(threads)
        self.default_threads = torch.get_num_threads()
        if how["kind"] == "load":
            from ...models import load, quiet_progress
            from ..factory import warm_runtime

            loaded = load(how["name"], how["device"], how["dtype"], quiet_progress, runtime=how.get("runtime"))
            self._new = lambda: new_runtime(loaded)
            self._warm = lambda: warm_runtime(loaded)
        else:
            weights = InMemory(how["model"], how["device"])
            weights.model.eval()
            self._new = lambda: new_runtime(weights)
            self._warm = lambda: 0
        self.sessions: dict[str, _Session] = {}
        self._ended: OrderedDict[str, bool] = OrderedDict()  # recently closed or stopped sessions (True: stopped)
        self._lock = threading.Lock()
        self._ended_passes = 0
        self._after_stop: list[int] = []

    def ready(self) -> dict:
        import ray

        return {"pid": os.getpid(), "node": ray.get_runtime_context().get_node_id(), "threads": torch.get_num_threads()}

    def warm(self) -> int:
        """The first run's context, its template head read (its runtime's ``warm``: llama.cpp's
        :func:`ensemble.members.llamacpp.warm_context`), as the app's
        warm-up does in process; returns the ids read."""
        return self._warm()

    def _session(self, session: str, create: bool = True) -> _Session:
        """A run's session: made by its first compute call. A Stop that arrived before it, a call after the run
        closed it, or a question about rows of a session that is gone are refused (nothing is computed for them)."""
        with self._lock:
            found = self.sessions.get(session)
            if found is not None:
                return found
            if session in self._ended:
                raise Cancelled("Stopped by the user.") if self._ended[session] else EnsembleError("This run has ended.")
            if not create:
                raise EnsembleError("A member holds no session of this run.")
            found = self.sessions[session] = _Session(self._new())
            return found

    def _end(self, session: str, stopped: bool) -> None:
        self._ended[session] = stopped or self._ended.get(session, False)
        while len(self._ended) > 4096:
            self._ended.popitem(last=False)

    def _threads(self, model, threads: int | None) -> None:
        """The session's thread count for this pass (None: the actor's default, whatever an earlier run asked);
        a llama.cpp session sets its own context's count."""
        threads = threads or self.default_threads
        if model.gil_free:  # a llama.cpp context's count is its own
            model.threads = threads
        elif torch.get_num_threads() != threads:
            torch.set_num_threads(threads)

    @staticmethod
    def _cost(model, before: ForwardStats) -> tuple[int, int, float]:
        after = model.stats
        return after.passes - before.passes, after.tokens - before.tokens, after.seconds - before.seconds

    @staticmethod
    def _answer(s: _Session, rows: torch.Tensor, how: tuple[int, int] | None):
        if how is None:
            return rows.numpy(), None
        size, passes = how
        handle = s.keep(rows, passes)
        summaries = [m.summary(size) for m in s.kept[handle]]
        for m in s.kept[handle]:
            m.forget()  # a kept row holds its logits only (KEEP_BYTES counts them); a fetch recomputes the rest
        return summaries, handle

    def rows(self, session: str, keep: int, check: int, tail: list[int], positions: list[int], threads: int | None,
             how: tuple[int, int] | None):
        """The rows after ``positions``: whole (``how`` None), or summaries of ``how[0]`` ids, the rows kept for
        later questions with those of the last ``how[1]`` passes."""
        s = self._session(session)
        self._threads(s.model, threads)
        before = ForwardStats(**vars(s.model.stats))
        rows = s.model.rows(s.ids(keep, check, tail), positions)
        return (*self._answer(s, rows, how), self._cost(s.model, before))

    def draft(self, session: str, keep: int, check: int, tail: list[int], n: int, stop: list[int], threads: int | None,
              how: tuple[int, int]):
        """Greedy drafting of up to ``n`` tokens in this process (one call instead of one per token): each step's
        row is kept and summarised; a token of ``stop`` (end of sequence) ends the draft unappended."""
        s = self._session(session)
        self._threads(s.model, threads)
        before = ForwardStats(**vars(s.model.stats))
        ids, stop_ids = s.ids(keep, check, tail), set(stop)
        tokens, summaries, handles = [], [], []
        for _ in range(n):
            rows = s.model.rows(ids, [len(ids) - 1])
            (summary,), handle = self._answer(s, rows, how)
            tokens.append(summary.argmax)
            summaries.append(summary)
            handles.append(handle)
            if summary.argmax in stop_ids:
                break
            ids.append(summary.argmax)
        return tokens, summaries, handles, self._cost(s.model, before)

    def values(self, session: str, handle: int, index: int, ids: list[int]):
        return self._session(session, create=False).row(handle, index).values(ids)

    def row(self, session: str, handle: int, index: int):
        return self._session(session, create=False).row(handle, index).row.numpy()

    def branch(self, session: str, ctx: int, blocks: list[list[int]], targets: list[int], threads: int | None = None):
        s = self._session(session)
        self._threads(s.model, threads)  # its cache holds exactly the context: score_inline just asked for its logits
        before = ForwardStats(**vars(s.model.stats))
        return s.model.branch_scores(ctx, blocks, targets).numpy(), None, self._cost(s.model, before)

    def cancel(self, session: str) -> None:
        """Stop: the session's next pass raises (a draft of several passes ends after the one in flight)."""
        with self._lock:
            found = self.sessions.get(session)
            if found is None:
                self._end(session, stopped=True)  # its calls may still be queued: they will not compute
            elif not found.cancel.is_set():
                found.stopped_at = found.model.stats.passes
                found.cancel.set()

    def passes(self) -> dict:
        """Forward passes run by every session, ended ones too, and per stopped session how many passes it ran
        after its Stop arrived (at most the one in flight): what the tests read of a Stop."""
        with self._lock:
            live = sum(s.model.stats.passes for s in self.sessions.values())
            return {"passes": self._ended_passes + live, "after_stop": list(self._after_stop)}

    # ray.method(concurrency_group="control"): these run while a compute call is busy
    cancel.__ray_concurrency_group__ = passes.__ray_concurrency_group__ = "control"

    def drop(self, session: str) -> None:
        s = self.sessions.get(session)
        if s is not None:
            s.model.drop()
            s.kept.clear()
            s.bytes = 0

    def close(self, session: str) -> None:
        with self._lock:
            found = self.sessions.pop(session, None)
            self._end(session, stopped=False)
            if found is not None:
                self._ended_passes += found.model.stats.passes
                if found.stopped_at is not None:
                    self._after_stop.append(found.model.stats.passes - found.stopped_at)
        if found is not None:
            found.model.close()
