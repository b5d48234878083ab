"""The methods as registered classes: name -> class, each with its declared capabilities
(:mod:`ensemble.capabilities`) and what a run of it asks of its members.

A new method is a class here (its capabilities in :data:`ensemble.capabilities.CAPABILITIES`, its loop in a module
of this package); nothing else in the engine, the views or the CLI compares its name.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, ClassVar

from ..capabilities import CAPABILITIES, Capabilities
from ..errors import SettingsError
from .every_token import run_every_token
from .safe import run_safe
from .single import run_single
from .specem import run_specem

if TYPE_CHECKING:
    from ..settings import Settings
    from .base import Run


class Method:
    """A method: its capabilities, its loop (:meth:`steps`) and what its runs ask of their members."""

    capabilities: ClassVar[Capabilities]

    @classmethod
    def steps(cls, run: Run, **options) -> Iterator:
        """The method's loop over ``run``: a generator yielding events and returning the stop reason."""
        raise NotImplementedError

    @classmethod
    def reads_whole_rows(cls, settings: Settings) -> bool:
        """Whether a run reads its members' whole rows (:mod:`ensemble.tokens.distribution`): when it samples (a tempered, nucleus
        filtered draw), and for GaC's geometric mean over the whole union vocabulary; every greedy run with the
        default sharpening reads summaries."""
        caps = cls.capabilities
        geometric_gac = caps.fusion_for(settings.fusion) == "gac" and settings.sharpen_for(caps.name) == "geometric"
        return settings.temperature > 0 or (caps.fuses and geometric_gac)

    @classmethod
    def rows_kept(cls, settings: Settings, lead: bool) -> int:
        """How many passes back a run may still ask a member about a row (:mod:`ensemble.tokens.distribution`): in the round or
        step that computed it."""
        return 4


REGISTRY: dict[str, type[Method]] = {}


def register(cls: type[Method]) -> type[Method]:
    REGISTRY[cls.capabilities.name] = cls
    return cls


def method_class(name: str) -> type[Method]:
    found = REGISTRY.get(name) if isinstance(name, str) else None
    if found is None:
        raise SettingsError(f"Unknown method {str(name)[:40]!r}. Methods: {', '.join(REGISTRY)}.")
    return found


@register
class Single(Method):
    capabilities = CAPABILITIES["single"]

    @classmethod
    def steps(cls, run: Run, **options) -> Iterator:
        return run_single(run)


class _EveryToken(Method):
    """Fusion at every token; the subclass's capabilities name the fusion (UniTE's top-k union, GaC's vocabulary)."""

    @classmethod
    def steps(cls, run: Run, **options) -> Iterator:
        return run_every_token(run, cls.capabilities.fusion)


@register
class UniTE(_EveryToken):
    capabilities = CAPABILITIES["unite"]


@register
class GaC(_EveryToken):
    capabilities = CAPABILITIES["gac"]


@register
class SAFE(Method):
    capabilities = CAPABILITIES["safe"]

    @classmethod
    def steps(cls, run: Run, **options) -> Iterator:
        return run_safe(run)

    @classmethod
    def rows_kept(cls, settings: Settings, lead: bool) -> int:
        """SAFE decides a round's draft (up to n + 4 passes) after its verification and after its drafter drafted
        the next round ahead (as many again): the drafter's rows are read that much later."""
        return 2 * (settings.lookahead + 4) + 8 if lead else 4


@register
class SpecEM(Method):
    capabilities = CAPABILITIES["specem"]

    @classmethod
    def steps(cls, run: Run, recompute_context: bool = False, **options) -> Iterator:
        return run_specem(run, recompute_context=recompute_context)

    @classmethod
    def reads_whole_rows(cls, settings: Settings) -> bool:
        """Sampled drafts (``sample_drafts``) read whole rows too."""
        return super().reads_whole_rows(settings) or settings.sample_drafts
