"""The one place a member's runtime is built (:class:`~ensemble.members.runtime.Runtime`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .base import Backend
    from .runtime import Runtime


def new_runtime(loaded, backend: Backend | None = None) -> Runtime:
    """A fresh runtime for one run of ``loaded`` (a :class:`~ensemble.models.LoadedModel`, or anything with its
    ``runtime``, ``model`` and ``device``): a session of its member process on a process backend, else in this
    process on the model's own runtime (transformers or llama.cpp)."""
    if backend is not None and backend.remote:
        return backend.session(loaded)
    if loaded.runtime == "llamacpp":
        from .llamacpp import LlamaCppModel

        return LlamaCppModel(loaded.model)
    from .transformers import CachedModel

    return CachedModel(loaded.model, loaded.device)
