"""Member backends: where each member's forward passes run.

A run's methods talk to every member through a :class:`~ensemble.adapter.ModelAdapter`: the text side
(:class:`~ensemble.response.ResponseTokens`) always lives in the coordinating process, the model side (a
*runtime* with ``rows``/``branch_scores``/``drop``) lives where the backend puts it:

- :class:`LocalBackend`: in this process, one member after another (today's behaviour; for environments where
  separate processes do not fit, such as a ZeroGPU Space).
- :class:`~ensemble.members.ray_backend.RayBackend`: one Ray actor per member, on this machine or on the nodes
  of a Ray cluster, so members compute at the same time (:meth:`Backend.map` runs per-member work in threads
  that wait on the actors).

Both give token-for-token the same output (tested): the methods' decisions do not depend on the backend.
"""

from __future__ import annotations

from .base import (
    BACKEND_ENV,
    BACKENDS,
    Backend,
    LocalBackend,
    auto_backend,
    backend_from_env,
    close_backends,
    interrupt_on_sigterm,
    make_backend,
    parse_resources,
)

__all__ = [
    "BACKENDS",
    "BACKEND_ENV",
    "Backend",
    "LocalBackend",
    "auto_backend",
    "backend_from_env",
    "close_backends",
    "interrupt_on_sigterm",
    "make_backend",
    "parse_resources",
]
