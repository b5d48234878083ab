"""Members: where and how each member's forward passes run.

A run's methods talk to every member through a :class:`~ensemble.methods.member.ModelAdapter`: the text side
(:class:`~ensemble.tokens.response.ResponseTokens`) always lives in the coordinating process, the model side (a
:class:`~.runtime.Runtime`: forward passes and KV cache, built by :func:`~.factory.new_runtime`) lives where the
backend puts it:

- :mod:`.runtime`: the interface, :class:`~.runtime.ForwardStats` and a run's :class:`~.runtime.RunPolicy`;
  :mod:`.transformers` and :mod:`.llamacpp`: the runtimes in this process; :mod:`.ray`: a member process's.
- :class:`LocalBackend`: in this process, one member after another (for environments where separate processes do
  not fit, such as a ZeroGPU Space; llama.cpp members at the same time in threads where that measured faster).
- :class:`~ensemble.members.ray.RayBackend`: one Ray actor per member, on this machine or on the nodes
  of a Ray cluster, so members compute at the same time (:meth:`Backend.map` runs per-member work in threads
  that wait on the actors).

Both give token-for-token the same output (tested): the methods' decisions do not depend on the backend.
"""

from __future__ import annotations

from .backends import (
    BACKEND_ENV,
    BACKENDS,
    auto_backend,
    backend_from_env,
    close_backends,
    interrupt_on_sigterm,
    make_backend,
    parse_resources,
    warm,
)
from .base import Backend
from .factory import new_runtime
from .local import LocalBackend

_RUNTIME = ("ForwardStats", "RunPolicy", "Runtime")
"""From :mod:`.runtime`, loaded on first use: it reads torch, which the backend names (``ensemble-lens --help``)
do not need."""


def __getattr__(name):
    if name in _RUNTIME:
        from . import runtime

        return getattr(runtime, name)
    raise AttributeError(name)


__all__ = [
    "BACKENDS",
    "BACKEND_ENV",
    "Backend",
    "ForwardStats",
    "LocalBackend",
    "RunPolicy",
    "Runtime",
    "auto_backend",
    "backend_from_env",
    "close_backends",
    "interrupt_on_sigterm",
    "make_backend",
    "new_runtime",
    "parse_resources",
    "warm",
]
