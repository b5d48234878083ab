"""The trace of a run: what every method decided, token by token and round by round.

A trace is plain data (dataclasses of str, numbers, lists and dicts) so it round-trips through JSON
exactly. ``visual/`` renders traces without touching a model, and the app replays uploaded trace files, so
:func:`from_json` treats its input as untrusted: size-capped, depth- and number-bounded before parsing,
schema-checked, consistency-checked (:mod:`ensemble.trace_check`), never evaluated.
"""

from __future__ import annotations

import gzip
import io
import json
import math
import zlib
from dataclasses import asdict, dataclass, field, fields

from . import trace_check, trace_values
from .capabilities import capabilities
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
from .errors import TraceFormatError

__all__ = [  # the decision records are re-exported: ``visual/`` imports the trace's types from here only
    "DECISIONS",
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
]

SCHEMA_VERSION = 2
"""2: typed decision details and the resolved ``drafter``; version 1 files are migrated by :meth:`RunTrace.from_dict`."""
MAX_TRACE_BYTES = 20 * 1024 * 1024



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


def _unpacked(data: bytes) -> bytes:
    """A gzip-packed trace (as ``evaluate`` keeps them, ``traces/<method>/<qid>.json.gz``) unpacked, reading at most
    one byte past the size limit (so a small file that unpacks to gigabytes is refused, not unpacked); other bytes
    as they are."""
    if not data.startswith(b"\x1f\x8b"):
        return data
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(data)) as fh:
            unpacked = fh.read(MAX_TRACE_BYTES + 1)
    except (OSError, EOFError, zlib.error) as exc:
        raise TraceFormatError(f"Trace file looks gzip-packed but does not unpack ({type(exc).__name__}).") from exc
    if len(unpacked) > MAX_TRACE_BYTES:
        raise TraceFormatError("Trace file unpacks to more than 20 MB; the limit is 20 MB.")
    return unpacked


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
        from .settings import Settings

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
            _check(data)
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
            text = _unpacked(text)
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
    kept fusion (issue 30): their settings say so.
    """
    if data["schema_version"] == 1:
        data["drafter"] = _v1_drafter(data)
        data["schema_version"] = 2
    if isinstance(data.get("settings"), dict):
        data["settings"].setdefault("drafter_weight", 1.0)
        data["settings"].setdefault("sharpen_scope", "vocabulary")
        data["settings"].setdefault("after_kept", "walk-on")


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
_TYPES = {
    "method": str,
    "models": list,
    "settings": dict,
    "prompt": str,
    "text": str,
    "tokens": list,
    "rounds": list,
    "stats": dict,
    "warnings": list,
    "model_info": dict,
}
_TOKEN_TYPES = {"index": int, "text": str, "start": int, "end": int, "model": str, "decision": str}
_FUSION_TYPES = {
    "boundary": int,
    "fusion": str,
    "weights": dict,
    "per_model": dict,
    "before": list,
    "sharpen": str,
    "sharpened": bool,
    "choice": str,
}
_ROUND_TYPES = {"index": int, "start": int, "candidates": list, "scores": list}


def _require(obj, types: dict, where: str) -> None:
    if not isinstance(obj, dict):
        raise TraceFormatError(f"{where} must be an object.")
    for key, kind in types.items():
        if key not in obj:
            raise TraceFormatError(f"{where} is missing the field {key!r}.")
        value = obj[key]
        ok = isinstance(value, kind) and not (kind is int and isinstance(value, bool))
        if not ok:
            raise TraceFormatError(f"{where}.{key} must be {kind.__name__}, not {type(value).__name__}.")


def _optional(obj: dict, key: str, kind: type, where: str) -> None:
    """A field that may be absent or null, else of ``kind`` (ints accepted where floats are)."""
    value = obj.get(key)
    if value is None:
        return
    kinds = (int, float) if kind is float else (kind,)
    if not isinstance(value, kinds) or isinstance(value, bool):
        raise TraceFormatError(f"{where}.{key} must be {kind.__name__} or null, not {type(value).__name__}.")


def _check_pairs(pairs, where: str) -> None:
    if not isinstance(pairs, list):
        raise TraceFormatError(f"{where} must be a list of [key, probability] pairs.")
    for pair in pairs:
        if not (
            isinstance(pair, list)
            and len(pair) == 2
            and isinstance(pair[0], str)
            and isinstance(pair[1], int | float)
            and not isinstance(pair[1], bool)
        ):
            raise TraceFormatError(f"{where} must hold [key, probability] pairs.")


def _check_drafter(data: dict) -> None:
    _optional(data, "drafter", str, "trace")
    if data.get("drafter") is not None and data["drafter"] not in data["models"]:
        raise TraceFormatError("trace.drafter must be one of the trace's models.")


def _check(data) -> None:
    """Raise :class:`TraceFormatError` with a precise message unless ``data`` is a valid trace."""
    if not isinstance(data, dict):
        raise TraceFormatError("A trace must be a JSON object.")
    trace_values.check_version(data, SCHEMA_VERSION)
    data.setdefault("rounds", [])
    data.setdefault("warnings", [])
    data.setdefault("model_info", {})
    data.setdefault("stats", {})
    trace_values.check_sizes(data)
    _require(data, _TYPES, "trace")
    if not all(isinstance(m, str) for m in data["models"]):
        raise TraceFormatError("trace.models must be a list of model names.")
    for i, tok in enumerate(data["tokens"]):
        trace_values.checkpoint()
        _check_token(tok, f"trace.tokens[{i}]", len(data["text"]))
    for i, rnd in enumerate(data["rounds"]):
        _check_round(rnd, f"trace.rounds[{i}]")
    _check_stats(data["stats"])
    if not all(isinstance(w, str) for w in data["warnings"]):
        raise TraceFormatError("trace.warnings must be a list of messages.")
    _optional(data, "created", str, "trace")
    _check_drafter(data)
    _optional(data, "error", str, "trace")
    _check_fork(data)
    trace_values.check_domains(data)


def _check_fork(data: dict) -> None:
    """A fork's record: the run it continues (method, models) and where (token ``at``, characters ``chars``)."""
    fork = data.get("fork")
    if fork is None:
        return
    if not isinstance(fork, dict):
        raise TraceFormatError("trace.fork must be an object (the run this one forks) or null.")
    _require(fork, {"at": int, "chars": int, "method": str, "models": list}, "trace.fork")
    if not 0 <= fork["at"] <= 1_000_000 or not 0 <= fork["chars"] <= len(data["text"]):
        raise TraceFormatError("trace.fork.at and trace.fork.chars must be a token number and a place in the text.")
    if not all(isinstance(m, str) for m in fork["models"]):
        raise TraceFormatError("trace.fork.models must be a list of model names.")


def _check_token(tok, where: str, text_len: int) -> None:
    _require(tok, _TOKEN_TYPES, where)
    if tok["decision"] not in DECISIONS:
        raise TraceFormatError(f"{where}.decision {tok['decision'][:40]!r} is not one of {', '.join(DECISIONS)}.")
    if not 0 <= tok["start"] <= tok["end"] <= text_len:
        raise TraceFormatError(f"{where} has a span outside the text.")
    if not isinstance(tok.get("details", {}), dict):
        raise TraceFormatError(f"{where}.details must be an object.")
    _optional(tok, "condition", str, where)
    _optional(tok, "round", int, where)
    if tok.get("topk") is not None:
        _check_pairs(tok["topk"], f"{where}.topk")
    if tok.get("fusion") is not None:
        _check_fusion(tok["fusion"], f"{where}.fusion")


def _check_fusion(fusion, where: str) -> None:
    _require(fusion, _FUSION_TYPES, where)
    _optional(fusion, "draft", str, where)
    _optional(fusion, "ms", float, where)
    if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in fusion["weights"].values()):
        raise TraceFormatError(f"{where}.weights must map model names to numbers.")
    _check_pairs(fusion["before"], f"{where}.before")
    if fusion.get("after") is not None:
        _check_pairs(fusion["after"], f"{where}.after")
    for model, pairs in fusion["per_model"].items():
        _check_pairs(pairs, f"{where}.per_model[{model[:40]!r}]")


def _check_round(rnd, where: str) -> None:
    _require(rnd, _ROUND_TYPES, where)
    for cand in rnd["candidates"]:
        if not isinstance(cand, dict) or not isinstance(cand.get("model"), str) or not isinstance(cand.get("text"), str):
            raise TraceFormatError(f"{where}.candidates must hold objects with 'model' and 'text'.")
    for row in rnd["scores"]:
        if not isinstance(row, list) or not all(isinstance(x, int | float) or x is None for x in row):
            raise TraceFormatError(f"{where}.scores must be a matrix of numbers.")
    _optional(rnd, "winner", str, where)
    _optional(rnd, "winner_index", int, where)
    _optional(rnd, "accepted_text", str, where)
    aggregate, verifiers = rnd.get("aggregate", []), rnd.get("verifiers", [])
    if not isinstance(aggregate, list) or not all(isinstance(x, int | float) and not isinstance(x, bool) for x in aggregate):
        raise TraceFormatError(f"{where}.aggregate must be a list of numbers.")
    if not isinstance(verifiers, list) or not all(isinstance(x, str) for x in verifiers):
        raise TraceFormatError(f"{where}.verifiers must be a list of model names.")
    if not isinstance(rnd.get("details", {}), dict):
        raise TraceFormatError(f"{where}.details must be an object.")
    for name in ("weights_before", "weights_after", "rewards", "timings"):
        weights = rnd.get(name, {})
        if not isinstance(weights, dict) or not all(isinstance(v, int | float) for v in weights.values()):
            raise TraceFormatError(f"{where}.{name} must map model names to numbers.")


def _check_stats(stats: dict) -> None:
    for key in ("decisions", "forward_passes", "forward_tokens", "forward_s", "member_bytes", "member_row_bytes", "wins"):
        value = stats.get(key, {})
        if not isinstance(value, dict) or not all(isinstance(v, int | float) for v in value.values()):
            raise TraceFormatError(f"trace.stats.{key} must map names to numbers.")
    for key in ("rounds", "draft_tokens", "draft_discarded", "fusion_ms_mean", "first_token_s"):
        _optional(stats, key, float, "trace.stats")
    _optional(stats, "stop_reason", str, "trace.stats")
    for key in ("generated_tokens", "ensemble_steps", "et_ratio", "latency_s", "tokens_per_s"):
        value = stats.get(key, 0)
        if value is not None and (not isinstance(value, int | float) or isinstance(value, bool)):
            raise TraceFormatError(f"trace.stats.{key} must be a number.")
