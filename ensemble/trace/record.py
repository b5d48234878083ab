"""The trace of a run: what every method decided, token by token and round by round.

A trace is plain data (dataclasses of str, numbers, lists and dicts) so it round-trips through JSON
exactly. ``visual/`` renders traces without touching a model, and the app replays uploaded trace files, so
:func:`from_json` treats its input as untrusted: size-capped, depth- and number-bounded before parsing,
schema-checked, consistency-checked (:mod:`ensemble.trace.check`), never evaluated.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, fields

from ..capabilities import capabilities
from ..errors import TraceFormatError
from . import check as trace_check
from . import values as trace_values
from .decisions import (
    DECISIONS,
    CheckedDetails,
    ConsensusDetails,
    Decision,
    Details,
    DrafterDetails,
    EnsembledDetails,
    FusedDetails,
    GatedDetails,
    OovBlockedDetails,
    SegmentDetails,
    as_decision,
    details_for,
)
from .schema import SCHEMA_VERSION, check_shape
from .values import MAX_TRACE_BYTES

__all__ = [  # the decision records are re-exported: ``visual/`` imports the trace's types from here only
    "DECISIONS",
    "MAX_TRACE_BYTES",
    "CheckedDetails",
    "ConsensusDetails",
    "Decision",
    "Details",
    "DrafterDetails",
    "EnsembledDetails",
    "FusedDetails",
    "FusionRecord",
    "GatedDetails",
    "OovBlockedDetails",
    "RoundRecord",
    "RunStats",
    "RunTrace",
    "SegmentDetails",
    "TokenRecord",
    "finite",
    "unique_labels",
]


@dataclass
class FusionRecord:
    """One fusion step: every model's top-k, the fused distribution before/after sharpening, the choice."""

    boundary: int
    fusion: str  # "unite" | "gac"
    weights: dict[str, float]
    per_model: dict[str, list[list]]  # model -> [[key, probability], ...]
    before: list[list]  # fused top-k before sharpening
    after: list[list] | None  # fused top-k after sharpening (None when sharpening did not run)
    sharpen: str  # "none" | "heuristic" | "geometric"
    sharpened: bool
    choice: str
    draft: str | None = None
    ms: float = 0.0


@dataclass
class TokenRecord:
    """One generated token (for multi-model methods: one accepted unit of text)."""

    index: int
    text: str
    start: int
    end: int
    model: str  # whose token this is (drafter, fused, or SpecEM segment winner)
    decision: Decision
    condition: str | None = None
    round: int | None = None
    details: Details = field(default_factory=Details)  # the decision's own record (a dict is converted)
    fusion: FusionRecord | None = None
    topk: list[list] | None = None  # the deciding model's top-k [[key, probability], ...]

    def __setattr__(self, name, value):
        """Keep ``decision`` a :class:`Decision` and ``details`` the record type of that decision."""
        if name == "decision":
            value = as_decision(value)
        elif name == "details":
            value = details_for(self.__dict__.get("decision"), value)
        object.__setattr__(self, name, value)
        if name == "decision" and "details" in self.__dict__:
            object.__setattr__(self, "details", details_for(value, self.details))

    def to_dict(self) -> dict:
        data = asdict(self)
        data["details"] = self.details.to_dict()
        return data


@dataclass
class RoundRecord:
    """One round of a segment or draft method (SpecEM rounds, SAFE draft rounds)."""

    index: int
    start: int  # character offset in the response where the round began
    candidates: list[dict] = field(default_factory=list)  # {"model", "text", "tokens"}
    verifiers: list[str] = field(default_factory=list)
    scores: list[list[float]] = field(default_factory=list)  # verifier x candidate
    aggregate: list[float] = field(default_factory=list)
    weights_before: dict[str, float] = field(default_factory=dict)
    weights_after: dict[str, float] = field(default_factory=dict)
    rewards: dict[str, float] = field(default_factory=dict)
    winner: str | None = None
    winner_index: int | None = None
    accepted_text: str = ""
    timings: dict[str, float] = field(default_factory=dict)
    details: dict = field(default_factory=dict)


@dataclass
class RunStats:
    generated_tokens: int = 0
    ensemble_steps: int = 0
    et_ratio: float = 0.0
    rounds: int = 0
    latency_s: float = 0.0
    first_token_s: float | None = None
    tokens_per_s: float = 0.0
    decisions: dict[str, int] = field(default_factory=dict)
    forward_passes: dict[str, int] = field(default_factory=dict)
    forward_tokens: dict[str, int] = field(default_factory=dict)
    forward_s: dict[str, float] = field(default_factory=dict)  # seconds inside each model's forward passes
    member_bytes: dict[str, int] = field(default_factory=dict)  # bytes to and from member processes (Ray backend)
    member_row_bytes: dict[str, int] = field(default_factory=dict)  # what whole float32 rows of the same answers take
    draft_tokens: int = 0
    draft_discarded: int = 0
    fusion_ms_mean: float = 0.0
    wins: dict[str, int] = field(default_factory=dict)
    stop_reason: str = ""


@dataclass
class RunTrace:
    method: str
    models: list[str]
    settings: dict
    prompt: str
    text: str = ""
    tokens: list[TokenRecord] = field(default_factory=list)
    rounds: list[RoundRecord] = field(default_factory=list)
    stats: RunStats = field(default_factory=RunStats)
    warnings: list[str] = field(default_factory=list)
    error: str | None = None
    model_info: dict[str, dict] = field(default_factory=dict)
    drafter: str | None = None  # the model whose tokens the others check (SAFE's drafter, GaC's primary); None: SpecEM
    created: str = ""
    fork: dict | None = None  # a fork (ensemble.fork): {"at", "chars", "method", "models"}; tokens cover text[chars:]
    schema_version: int = SCHEMA_VERSION

    def safe_weights(self) -> dict[str, float]:
        """The weights a SAFE run's consensus and fusion gave its models (:meth:`Settings.safe_weights` of its
        settings and drafter); {} when the settings of an uploaded trace do not say them clearly."""
        from ..settings import Settings

        try:
            settings = Settings(weights={str(k): float(v) for k, v in dict(self.settings.get("weights") or {}).items()},
                                drafter_weight=float(self.settings.get("drafter_weight", 1.0)))
            return settings.safe_weights(str(self.drafter))
        except (TypeError, ValueError, AttributeError):
            return {}

    # -- serialisation ----------------------------------------------------------------------------------
    def to_dict(self) -> dict:
        data = asdict(self)
        data["tokens"] = [t.to_dict() for t in self.tokens]
        return finite(data)

    def to_json(self, indent: int | None = None) -> str:
        return json.dumps(self.to_dict(), ensure_ascii=False, indent=indent, allow_nan=False)

    @classmethod
    def from_dict(cls, data: dict) -> RunTrace:
        try:
            check_shape(data)
            _migrate(data)
            kwargs = _known(cls, data)
            kwargs["tokens"] = [_token_from(t) for t in data.get("tokens", [])]
            kwargs["rounds"] = [RoundRecord(**_known(RoundRecord, r)) for r in data.get("rounds", [])]
            kwargs["stats"] = RunStats(**_known(RunStats, data.get("stats", {})))
            trace = cls(**kwargs)
            trace_check.check(trace)
        except (TypeError, ValueError, AttributeError, KeyError) as exc:  # a shape the checks above did not foresee
            first = (str(exc).splitlines() or [""])[0][:160]
            raise TraceFormatError(f"Trace file is malformed ({type(exc).__name__}: {first}).") from exc
        return trace

    @classmethod
    def from_json(cls, text: str | bytes) -> RunTrace:
        if isinstance(text, bytes):
            text = trace_check.unpacked(text)
            if len(text) > MAX_TRACE_BYTES:
                raise TraceFormatError(f"Trace file is {len(text) / 1e6:.1f} MB; the limit is 20 MB.")
            try:
                text = text.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise TraceFormatError("Trace file is not UTF-8 text (a JSON trace was expected).") from exc
        if len(text.encode("utf-8", "surrogatepass")) > MAX_TRACE_BYTES:
            raise TraceFormatError("Trace file is larger than 20 MB.")
        # depth and size bounded before parsing; text cleaned once, here, so that every view gets valid text
        data, warning = trace_values.clean(text, trace_check.parse(text))
        trace = cls.from_dict(data)
        trace.warnings.extend([warning] if warning else [])
        return trace

    def token_table(self) -> list[dict]:
        """One row per token, for tables and CSV export."""
        rows = []
        for t in self.tokens:
            rows.append(
                {
                    "index": t.index,
                    "text": t.text,
                    "start": t.start,
                    "end": t.end,
                    "model": t.model,
                    "decision": t.decision,
                    "condition": t.condition or "",
                    "round": "" if t.round is None else t.round,
                    "fused_choice": t.fusion.choice if t.fusion else "",
                    "draft": t.fusion.draft if t.fusion and t.fusion.draft is not None else "",
                    "sharpened": bool(t.fusion.sharpened) if t.fusion else False,
                    "blocked_by": ",".join(t.details.blocked_by or []) if isinstance(t.details, OovBlockedDetails) else "",
                }
            )
        return rows


def finite(value):
    """A JSON-safe copy: JSON has no NaN/inf, so they become None (exports never fail), and keys become strings."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite(v) for v in value]
    return value


def _migrate(data: dict) -> None:
    """Bring a checked older trace up to :data:`SCHEMA_VERSION`, in place: the one place that knows old formats.

    Version 1 did not record the drafter: it is the ``drafter`` setting when that names a model, else (SAFE) the
    first model a check recorded a probability for that is not a verifier there, else the first model; SpecEM
    has none. Version 1 details have the same keys as version 2's typed records.

    Traces made before the ``drafter_weight`` setting existed weighed SAFE's drafter like every model: their
    settings get ``drafter_weight`` 1, so an explanation of their weighted means stays true. Traces made before
    ``sharpen_scope`` and ``after_kept`` existed sharpened from the drafter's whole vocabulary and walked on after a
    kept fusion (issue 30): their settings say so. Traces made before ``unite_missing`` existed counted a missing
    UniTE key's fallback token once (issue 39): ``once``.
    """
    if data["schema_version"] == 1:
        data["drafter"] = _v1_drafter(data)
        data["schema_version"] = 2
    if isinstance(data.get("settings"), dict):
        data["settings"].setdefault("drafter_weight", 1.0)
        data["settings"].setdefault("sharpen_scope", "vocabulary")
        data["settings"].setdefault("after_kept", "walk-on")
        data["settings"].setdefault("unite_missing", "once")


def _v1_drafter(data: dict) -> str | None:
    models = data["models"]
    caps = capabilities(data.get("method"))
    if (caps is not None and not caps.has_drafter) or not models:
        return None
    chosen = data["settings"].get("drafter")
    if isinstance(chosen, str) and chosen in models:
        return chosen
    if caps is not None and caps.verifies_drafter:
        for tok in data["tokens"]:
            d = tok.get("details") or {}
            verifiers = {*_str_keys(d.get("verifier_tokens")), *_strs(d.get("blocked_by"))}
            for model in [*_str_keys(d.get("probs")), *_str_keys(d.get("per_model_top"))]:
                if model in models and model not in verifiers:
                    return model
    return models[0]


def _str_keys(value) -> list[str]:
    return list(value) if isinstance(value, dict) else []


def _strs(value) -> list[str]:
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def unique_labels(labels: list[str], mark: str = "{label}#{n}") -> list[str]:
    """The labels with each repeat numbered by ``mark`` (the second ``qwen`` becomes ``qwen#2``): model names of
    a trace (a model listed twice), and category labels of a chart (plotly merges equal ones)."""
    seen: dict[str, int] = {}
    out = []
    for item in labels:
        seen[item] = seen.get(item, 0) + 1
        out.append(item if seen[item] == 1 else mark.format(label=item, n=seen[item]))
    return out


def _known(cls, data: dict) -> dict:
    names = {f.name for f in fields(cls)}
    return {k: v for k, v in data.items() if k in names}


def _token_from(data: dict) -> TokenRecord:
    trace_values.checkpoint()
    kwargs = _known(TokenRecord, data)
    if kwargs.get("fusion") is not None:
        kwargs["fusion"] = FusionRecord(**_known(FusionRecord, kwargs["fusion"]))
    return TokenRecord(**kwargs)


# -- schema check ----------------------------------------------------------------------------------------
