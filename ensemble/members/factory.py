"""The one place a member's runtime is built (:class:`~ensemble.members.runtime.Runtime`): the class its
registration names (:data:`ensemble.models.runtimes.REGISTRY`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..models.runtimes import runtime_info

if TYPE_CHECKING:
    from .base import Backend
    from .runtime import Runtime


def runtime_class(loaded) -> type[Runtime]:
    """The :class:`Runtime` subclass that computes ``loaded`` in this process, as its runtime's registration names it."""
    return runtime_info(loaded.runtime).part("computes")


def new_runtime(loaded, backend: Backend | None = None) -> Runtime:
    """A fresh runtime for one run of ``loaded`` (a :class:`~ensemble.models.LoadedModel`, or anything with its
    ``runtime``, ``model`` and ``device``): a session of its member process on a process backend, else in this
    process on the model's own runtime (transformers or llama.cpp)."""
    if backend is not None and backend.remote:
        return backend.session(loaded)
    return runtime_class(loaded).for_loaded(loaded)


def warm_runtime(loaded) -> int:
    """Get ``loaded`` ready before its first run on its own runtime (llama.cpp reads the template head into the
    first context); returns the ids read (0: nothing to do)."""
    return runtime_class(loaded).warm(loaded)


def forget_prompts(loaded) -> None:
    """Make ``loaded``'s next run read its prompt afresh, as a new question's (the template head stays read)."""
    runtime_class(loaded).forget_prompts(loaded)
