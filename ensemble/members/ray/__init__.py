"""Members as Ray actors: :mod:`.backend` is the coordinator's side (:class:`RayBackend`, and :class:`RemoteModel`,
the runtime of one run's session), :mod:`.actor` what runs in a member's process (:class:`MemberActor`)."""

from __future__ import annotations

from .backend import RayBackend, RemoteModel, actor_options

__all__ = ["RayBackend", "RemoteModel", "actor_options"]
