"""What each method is and can do, declared once and torch-free: the engine's registry
(:mod:`ensemble.methods.registry`) gives every method class its entry here, and the views, the CLI and the
evaluation read it instead of comparing method names.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Capabilities:
    """A method's declared capabilities.

    Attributes:
        name: the method's name (``--method``, the trace's ``method``).
        label: its name for people.
        one_model: it runs one model, the baseline every ensemble is measured against (the others are ensembles).
        leads_draft: one model (the drafter) writes the text and the others check it: its passes are the run's
            critical path, so it gets every core when members compute at the same time (single, SAFE).
        has_drafter: the trace names a lead model (SAFE's drafter, the every-token methods' primary, the single
            model); False: every model drafts (SpecEM).
        segments: it commits whole segments per round, each chosen by the models' vote (SpecEM): its E/T is its
            votes, its tokens' decision is ``segment``.
        fusion: the fusion it is (``unite``, ``gac``: the every-token methods), or None (SAFE fuses with its
            ``fusion`` setting, and so would a single model's sharpening).
        fuses: it fuses next-token distributions on keys at all (SpecEM verifies segments instead).
        default_sharpen: the sharpening its runs use unless told (``heuristic`` for SAFE, ``none`` otherwise).
        decisions: the decisions its runs can produce (:mod:`ensemble.trace.readable` words them).
    """

    name: str
    label: str
    one_model: bool = False
    leads_draft: bool = False
    has_drafter: bool = True
    segments: bool = False
    fusion: str | None = None
    fuses: bool = True
    default_sharpen: str = "none"
    decisions: tuple[str, ...] = ()

    @property
    def verifies_drafter(self) -> bool:
        """Other models verify the drafter's drafts (SAFE): its tokens may be blocked, kept or replaced."""
        return self.leads_draft and not self.one_model

    def fusion_for(self, setting: str) -> str:
        """The fusion a run uses: the method's own, else the ``fusion`` setting."""
        return self.fusion or setting


CAPABILITIES: dict[str, Capabilities] = {
    c.name: c
    for c in (
        Capabilities("single", "single model", one_model=True, leads_draft=True, decisions=("drafter",)),
        Capabilities("unite", "UniTE", fusion="unite", decisions=("fused",)),
        Capabilities("gac", "GaC", fusion="gac", decisions=("fused", "gated")),
        Capabilities(
            "safe", "SAFE", leads_draft=True, default_sharpen="heuristic",
            decisions=("consensus", "oov_blocked", "gated", "ensembled_kept", "ensembled_replaced", "drafter"),
        ),
        Capabilities(
            "specem", "SpecEM", has_drafter=False, segments=True, fuses=False,
            decisions=("segment",),
        ),
    )
}
"""Every method, in the order the CLI and the app list them."""

METHODS = tuple(CAPABILITIES)
SINGLE = "single"
"""The one-model baseline's name (the CLI's default method, evaluate's ``single:NAME``)."""


def capabilities(method: str | None) -> Capabilities | None:
    """A method's capabilities, or None for a name that is not a method (an uploaded trace's may be anything)."""
    return CAPABILITIES.get(method) if isinstance(method, str) else None


def is_segments(method: str | None) -> bool:
    """Whether ``method`` commits segments by vote (SpecEM); False for unknown names."""
    found = capabilities(method)
    return bool(found and found.segments)


def verifies_drafter(method: str | None) -> bool:
    """Whether ``method`` has one drafter that the other models verify (SAFE), so a user may choose it; False for
    unknown names."""
    found = capabilities(method)
    return bool(found and found.verifies_drafter)


def is_one_model(method: str | None) -> bool:
    """Whether ``method`` is the one-model baseline; False for unknown names."""
    found = capabilities(method)
    return bool(found and found.one_model)
