"""What each token's decision was, as an enum member with a typed details record.

Methods write these records; ``visual/`` reads their fields. On disk a record is the plain dict it has always
been (``to_dict`` leaves out fields that were not recorded), so version-1 traces load into the same types.
An uploaded trace's values are untrusted: a field holds what the file held, and views check values where
they draw them. Keys this version does not know are kept in ``extra`` (written back, never read).

For code and tests written against the dict form, a record also answers ``details["key"]``, ``in``, ``get``,
assignment and ``pop``; new code reads the fields.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from enum import StrEnum
from typing import Any, ClassVar


class Decision(StrEnum):
    """Why a token is in the response (a ``str``: it compares, hashes and serialises as its value)."""

    DRAFTER = "drafter"  # plain token of the drafter / single model, nothing checked
    CONSENSUS = "consensus"  # SAFE: verifiers agree (condition: unanimous | confident)
    OOV_BLOCKED = "oov_blocked"  # SAFE: a verifier has no token edge here, fusing would hand it an OOV-like prefix
    ENSEMBLED_KEPT = "ensembled_kept"  # SAFE: fused, and the fused choice is the draft token
    ENSEMBLED_REPLACED = "ensembled_replaced"  # SAFE: fused, and the fused choice replaced the draft token
    FUSED = "fused"  # every-token UniTE / GaC
    GATED = "gated"  # GaC gate (gac, and SAFE with GaC): the main model's top probability is at or above the gate
    SEGMENT = "segment"  # SpecEM: the token belongs to the winning segment of a round


DECISIONS = tuple(d.value for d in Decision)


def as_decision(value):
    """``value`` as a :class:`Decision` when it names one, else unchanged (the schema check refuses it on load)."""
    return Decision(value) if isinstance(value, str) and value in DECISIONS else value


@dataclass
class Details:
    """What every decision may record: where it was taken and how each model cut the text there.

    Attributes:
        boundary: character offset of the decision (SAFE: the draft token's left boundary; None inside a character).
        splits: model -> [[text, start, end], ...], each model's own tokens near the decision.
        extra: keys this version does not know (from other versions' files), kept as they were.
        outside_top_k: member -> its k, for members on a server whose probabilities read at this decision include
            ids outside their top k (approximated: :class:`ensemble.tokens.distribution.TopDist`).
    """

    boundary: int | None = None
    splits: dict[str, list[list]] | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    outside_top_k: dict[str, int] | None = None

    KEEP_NONE: ClassVar[tuple[str, ...]] = ()  # fields written even when None (the on-disk shape has them)

    # -- the on-disk dict ---------------------------------------------------------------------------------
    @classmethod
    def from_mapping(cls, data: Mapping) -> Details:
        names = _field_names(cls)
        known = {k: v for k, v in data.items() if k in names}
        record = cls(**known)
        record.extra = {k: v for k, v in data.items() if k not in names}
        return record

    def to_dict(self) -> dict:
        out = {}
        for f in fields(self):
            if f.name == "extra":
                continue
            value = getattr(self, f.name)
            if value is not f.default or f.name in self.KEEP_NONE:
                out[f.name] = value
        out.update(self.extra)
        return out

    # -- the dict form, for code written against it -------------------------------------------------------
    def __contains__(self, key) -> bool:
        return key in self.to_dict()

    def __getitem__(self, key: str):
        return self.to_dict()[key]

    def get(self, key: str, default=None):
        return self.to_dict().get(key, default)

    def __setitem__(self, key: str, value) -> None:
        if key in _field_names(type(self)):
            setattr(self, key, value)
        else:
            self.extra[key] = value

    def __delitem__(self, key: str) -> None:
        if key not in self:
            raise KeyError(key)
        if key in _field_names(type(self)):
            setattr(self, key, next(f.default for f in fields(self) if f.name == key))
        else:
            del self.extra[key]

    def pop(self, key: str, *default):
        if key not in self:
            if default:
                return default[0]
            raise KeyError(key)
        value = self[key]
        del self[key]
        return value

    def __bool__(self) -> bool:
        return bool(self.to_dict())


def _field_names(cls) -> set[str]:
    return {f.name for f in fields(cls)} - {"extra"}


@dataclass
class DrafterDetails(Details):
    """A plain token of the drafter or single model; ``control_token``: a control token that adds no text;
    ``forced``: a fork's first token, the key a person chose ("What if it had chosen this?", :mod:`ensemble.fork`)."""

    control_token: bool = False
    forced: bool = False


@dataclass
class OovBlockedDetails(Details):
    """SAFE's stability check: the verifiers with no token edge at ``boundary`` (None: inside a character)."""

    blocked_by: list[str] | None = None
    # What the models wanted there (the inspector's top-k; no decision reads them), from the verification pass:
    per_model_top: dict[str, list[list]] | None = None  # model -> top-k; a blocked verifier's at ``verifier_from``
    verifier_from: dict[str, int] | None = None  # verifier -> where its row is: the boundary, or where its token starts
    verifier_tokens: dict[str, str] | None = None  # verifier -> its own token from there (display form)
    KEEP_NONE: ClassVar[tuple[str, ...]] = ("boundary",)


@dataclass
class CheckedDetails(Details):
    """SAFE's consensus check at a boundary every verifier shares.

    Attributes:
        per_model_top: model -> its top-k [[key, probability], ...] at the boundary.
        mean_prob: the weighted mean of ``probs`` (App. H), compared with 0.5.
        probs: the drafter's probability of its token and each verifier's of its own next token.
        verifier_tokens: each verifier's own next token there (display form, ``<eos>`` for the end).
    """

    per_model_top: dict[str, list[list]] | None = None
    mean_prob: float | None = None
    probs: dict[str, float] | None = None
    verifier_tokens: dict[str, str] | None = None


@dataclass
class ConsensusDetails(CheckedDetails):
    """The verifiers agree (the record's condition says how: unanimous | confident)."""


@dataclass
class GatedDetails(CheckedDetails):
    """GaC's gate: the ``primary`` model's top probability ``primary_top`` is at or above ``gate``.

    In SAFE with GaC the consensus fields are recorded too; ``completed_by``: every-token, the model that
    finished a character the key ended inside.
    """

    primary: str | None = None
    primary_top: float | None = None
    gate: float | None = None
    completed_by: str | None = None


@dataclass
class EnsembledDetails(CheckedDetails):
    """SAFE fused: the fused probability of the choice; sampling: the draft's acceptance probability."""

    accept_prob: float | None = None
    fused_prob: float | None = None
    completed_by: str | None = None
    completed: str | None = None  # traces written before ``completed_by``: the completed key


@dataclass
class EnsembledKeptDetails(EnsembledDetails):
    """The fused choice is the draft token."""


@dataclass
class EnsembledReplacedDetails(EnsembledDetails):
    """The fused choice replaced the draft token."""


@dataclass
class FusedDetails(Details):
    """Every-token fusion: each model's probability of the chosen key, the models that have it as a token."""

    support: dict[str, float] | None = None
    in_vocab: list[str] | None = None
    completed_by: str | None = None
    completed: str | None = None  # traces written before ``completed_by``


@dataclass
class SegmentDetails(Details):
    """SpecEM: the model whose winning segment the token belongs to."""

    segment_of: str | None = None


DETAILS: dict[Decision, type[Details]] = {
    Decision.DRAFTER: DrafterDetails,
    Decision.CONSENSUS: ConsensusDetails,
    Decision.OOV_BLOCKED: OovBlockedDetails,
    Decision.ENSEMBLED_KEPT: EnsembledKeptDetails,
    Decision.ENSEMBLED_REPLACED: EnsembledReplacedDetails,
    Decision.FUSED: FusedDetails,
    Decision.GATED: GatedDetails,
    Decision.SEGMENT: SegmentDetails,
}


def details_for(decision, value) -> Details:
    """``value`` (a details record, a dict, or None) as the details record of ``decision``."""
    cls = DETAILS.get(decision, Details) if isinstance(decision, str) else Details
    if type(value) is cls:
        return value
    if isinstance(value, Details):
        value = value.to_dict()
    return cls.from_mapping(value if isinstance(value, Mapping) else {})
