"""The shape of an untrusted trace's JSON, checked before any record is built: the schema version, each field's
type, the decision names, the sizes and value domains (:mod:`.values`). :meth:`ensemble.trace.RunTrace.from_dict`
calls :func:`check_shape`; consistency across records is :mod:`.check`'s.
"""

from __future__ import annotations

from ..errors import TraceFormatError
from . import values as trace_values
from .decisions import DECISIONS

SCHEMA_VERSION = 2
"""2: typed decision details and the resolved ``drafter``; version 1 files are migrated by :meth:`ensemble.trace.RunTrace.from_dict`."""


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


def check_shape(data) -> None:
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
