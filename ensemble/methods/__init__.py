"""Running a method: validated settings, fresh adapters, a stream of events, and the finished trace."""

from __future__ import annotations

import threading
from collections.abc import Iterator

from ..errors import Cancelled, MemberDied
from ..members import Backend
from ..members.factory import new_runtime
from ..members.local import LOCAL
from ..models import LoadedModel
from ..preflight import RunRequest, check_run
from ..settings import Settings
from ..trace import RunTrace, unique_labels
from .base import DraftEvent, RoundEvent, Run, StatusEvent, TokenEvent
from .member import ModelAdapter
from .registry import REGISTRY, Method, method_class

__all__ = ["REGISTRY", "DraftEvent", "EnsembleRun", "Method", "RoundEvent", "StatusEvent", "TokenEvent", "generate", "method_class", "unique_names"]


def unique_names(models: list[LoadedModel]) -> list[str]:
    """Trace names: a model listed twice (an identical copy) gets ``name#2``."""
    return unique_labels([m.name for m in models])


class EnsembleRun:
    """One run of a method on a prompt. Iterate :meth:`events` to stream; :attr:`trace` holds the result.

    Args:
        models: loaded models (shared, read-only); each run builds its own adapters and caches.
        prompt: the user's prompt.
        method: single | unite | gac | safe | specem.
        settings: engine settings (validated here).
        cancel: set it to stop the run between steps; the partial trace stays valid.
        recompute_context: SpecEM only: drop every cache each round (the released code's behaviour, for bench).
        backend: where the members compute (:mod:`ensemble.members`; default in this process).
        fork: a fork's record (:mod:`ensemble.fork`): the response starts as ``kept`` (the forked run's text up to
            the fork point) and ``fork`` is kept in the trace.
        force: a fork's forced key: its text is committed first, as the run's token 0 (every model re-syncs to
            it, as after a fused key), and the method continues from there.
    """

    def __init__(
        self,
        models: list[LoadedModel],
        prompt: str,
        method: str = "single",
        settings: Settings | None = None,
        cancel: threading.Event | None = None,
        recompute_context: bool = False,
        backend: Backend | None = None,
        fork: dict | None = None,
        kept: str = "",
        force: str = "",
    ):
        settings = settings or Settings()
        names = unique_names(models)
        vocab_sizes = {n: m.keys.vocab_size for n, m in zip(names, models, strict=True)}
        prompt, warnings = check_run(prompt, method, names, settings, vocab_sizes)  # as the front ends' preflight
        self.kind = method_class(method)
        if self.kind.capabilities.one_model:
            keep = names.index(settings.drafter) if settings.drafter else 0
            models, names = [models[keep]], [names[keep]]
        self.method = method
        self.recompute_context = recompute_context
        backend = backend or LOCAL
        self.adapters = [ModelAdapter(m, n, new_runtime(m, backend)) for m, n in zip(models, names, strict=True)]
        self.backend = backend.for_run([a.runtime for a in self.adapters])
        self.run = Run(self.kind, self.adapters, prompt, settings, cancel, self.backend, fork, kept, force, warnings)
        self.trace: RunTrace = self.run.trace

    @classmethod
    def from_request(cls, request: RunRequest, models: list[LoadedModel], **kwargs) -> EnsembleRun:
        """The run a front end's :func:`~ensemble.preflight.preflight` checked, on its loaded ``models`` (in the
        order of ``request.names``); ``kwargs``: ``cancel``, ``backend``."""
        return cls(models, request.prompt, request.method, request.settings, fork=request.fork, kept=request.kept,
                   force=request.force, **kwargs)

    def withdraw(self, count: int) -> None:
        """After a Stop: keep the first ``count`` tokens, the ones its viewer showed at the click, and finish
        the trace again (the app passes the strip's count, so nothing committed after the click shows)."""
        if self.trace.stats.stop_reason == "cancelled" and count < len(self.trace.tokens):
            self.run.withdraw(count)
            self.trace = self.run.finish("cancelled")

    def events(self) -> Iterator[TokenEvent | DraftEvent | RoundEvent | StatusEvent]:
        run = self.run
        reason = "budget"
        try:
            try:
                reason = yield from self.kind.steps(run, recompute_context=self.recompute_context)
            except Cancelled:
                reason = "cancelled"
                run.withdraw(run.released())  # records held back (a stop string might have cut them) never stream
            except KeyboardInterrupt:  # Ctrl-C (or SIGTERM in the CLI) inside a step: the trace ends as a Stop's does
                self.trace = run.finish("cancelled")
                raise
            except Exception as exc:
                if isinstance(exc, MemberDied):  # the trace so far is whole: it says which member stopped
                    run.finish("member_failed", error=str(exc))
                else:
                    run.finish("error", error=f"{type(exc).__name__}: {exc}")
                yield from run.release_all()
                raise
            self.trace = run.finish(reason or "budget")
            yield from run.release_all()
        finally:
            for adapter in self.adapters:
                adapter.close()  # free the run's KV caches, in member processes too


def generate(
    models: list[LoadedModel], prompt: str, method: str = "single", settings: Settings | None = None, **kwargs
) -> RunTrace:
    """Run a method to the end and return its trace."""
    job = EnsembleRun(models, prompt, method, settings, **kwargs)
    for _ in job.events():
        pass
    return job.trace
