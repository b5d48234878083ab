"""What the values of an uploaded trace may be, checked on the parsed JSON before any record is built.

Three checks, each a refusal in one line or a repair with a warning:

* **Sizes** (:func:`check_sizes`): how many tokens, rounds, models and candidates a trace holds, how long each
  top-k list is and how large each token's or round's record is. A view draws one record at a time, so a record
  of 900,000 top-k pairs is refused here instead of holding the inspector for half a minute.
* **Domains** (:func:`check_domains`): probabilities lie in [0, 1], weights, counts and times are not negative,
  places lie in the text, a round's winner is one of its candidates.
* **Text** (:func:`clean_text`): a JSON string may hold a lone UTF-16 surrogate (``"\\ud800"``), which no view and
  no response can encode; each is replaced by U+FFFD once, here, and the trace says so in its warnings.

Reading is also bounded in time: :func:`checkpoint` raises once the reading thread's deadline (set by
:mod:`ensemble.trace.read`) has passed; the loops over tokens and rounds call it.
"""

from __future__ import annotations

import json
import re
import threading
import time

from ..errors import TraceFormatError

MAX_TRACE_BYTES = 20 * 1024 * 1024  # a whole trace file, unpacked
MAX_TOKENS = 20_000  # a run has at most 4,096 new tokens, plus the bytes that finish a character
MAX_ROUNDS = 20_000
MAX_MODELS = 64  # also the most candidates and verifiers of a round
MAX_PAIRS = 5_000  # entries of one top-k list (a run records 5 per model, fusion records its top_k, default 10)
MAX_RECORD_CHARS = 1_000_000  # one token's or round's record as JSON (a real one is 1-5 KB)
PROB_SLACK = 1e-6  # rounding: a recorded probability is rounded to 6 places

_LONE = re.compile("[\ud800-\udfff]")  # after parsing, a pair of escapes is one character: what is left is lone
_LONE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_local = threading.local()


# -- time -------------------------------------------------------------------------------------------------
def set_deadline(deadline: float | None, limit_s: float = 0.0) -> None:
    """:func:`checkpoint` refuses in this thread after ``time.monotonic()`` ``deadline`` (None: never), saying that
    reading took more than ``limit_s`` seconds."""
    _local.deadline, _local.limit = deadline, limit_s


def checkpoint() -> None:
    deadline = getattr(_local, "deadline", None)
    if deadline is not None and time.monotonic() > deadline:
        raise TraceFormatError(time_limit_message(_local.limit))


def time_limit_message(limit_s: float) -> str:
    return (f"Reading the trace took more than {limit_s:g} s, so the server gave up on it; a trace the app or the "
            "CLI wrote reads in about a second.")


# -- version --------------------------------------------------------------------------------------------
def check_version(data: dict, supported: int) -> None:
    """Refuse JSON that is not a trace, or a trace of a version this one cannot read (1 to ``supported``)."""
    if "schema_version" not in data:
        raise TraceFormatError("This JSON is not an Ensemble Lens trace (it has no schema_version); save a trace from "
                               "the Trace tab, the API or `python -m ensemble generate --json`.")
    version = data["schema_version"]
    if type(version) is not int:
        raise TraceFormatError(f"trace.schema_version must be a whole number (1 to {supported}), not "
                               f"{json.dumps(version)[:40]}.")
    if not 1 <= version <= supported:
        raise TraceFormatError(f"Unsupported trace schema_version {version!r}; this version of Ensemble Lens reads "
                               f"versions 1 to {supported}.")


# -- sizes ------------------------------------------------------------------------------------------------
def check_sizes(data: dict) -> None:
    """Refuse a trace that holds more than a view may draw, before any record is built."""
    tokens, rounds, models = data.get("tokens"), data.get("rounds"), data.get("models")
    if isinstance(tokens, list) and len(tokens) > MAX_TOKENS:
        raise TraceFormatError(f"Trace has {len(tokens):,} tokens; the limit is {MAX_TOKENS:,}.")
    if isinstance(rounds, list) and len(rounds) > MAX_ROUNDS:
        raise TraceFormatError(f"Trace has {len(rounds):,} rounds; the limit is {MAX_ROUNDS:,}.")
    if isinstance(models, list) and len(models) > MAX_MODELS:
        raise TraceFormatError(f"Trace names {len(models):,} models; the limit is {MAX_MODELS}.")
    for where, pairs in _pair_lists(data):
        if len(pairs) > MAX_PAIRS:
            raise TraceFormatError(f"{where} has {len(pairs):,} entries; a top-k list holds at most {MAX_PAIRS:,}.")
    for name, records in (("tokens", tokens), ("rounds", rounds)):
        for i, record in enumerate(records if isinstance(records, list) else []):
            checkpoint()
            size = len(json.dumps(record, ensure_ascii=False, default=str))
            if size > MAX_RECORD_CHARS:
                raise TraceFormatError(f"trace.{name}[{i}] is {size:,} characters of JSON; a record may hold at most "
                                       f"{MAX_RECORD_CHARS:,} (a real one holds a few thousand).")
            if name == "rounds" and isinstance(record, dict):
                for key in ("candidates", "verifiers", "scores"):
                    if isinstance(record.get(key), list) and len(record[key]) > MAX_MODELS:
                        raise TraceFormatError(f"trace.rounds[{i}].{key} has {len(record[key]):,} entries; a round "
                                               f"has at most {MAX_MODELS} (one per model).")


def _pair_lists(data: dict):
    """(where, list) of every top-k list of the tokens: their own, their fusion's, SAFE's per-model tops."""
    for i, tok in enumerate(data.get("tokens") or []):
        if not isinstance(tok, dict):
            continue
        where = f"trace.tokens[{i}]"
        if isinstance(tok.get("topk"), list):
            yield f"{where}.topk", tok["topk"]
        fusion = tok.get("fusion")
        if isinstance(fusion, dict):
            for key in ("before", "after"):
                if isinstance(fusion.get(key), list):
                    yield f"{where}.fusion.{key}", fusion[key]
            for model, pairs in _items(fusion.get("per_model")):
                yield f"{where}.fusion.per_model[{model[:40]!r}]", pairs
        details = tok.get("details")
        if isinstance(details, dict):
            for model, pairs in _items(details.get("per_model_top")):
                yield f"{where}.details.per_model_top[{model[:40]!r}]", pairs


def _items(value):
    return [(str(k), v) for k, v in value.items() if isinstance(v, list)] if isinstance(value, dict) else []


# -- domains ----------------------------------------------------------------------------------------------
_DETAIL_PROBS = ("mean_prob", "accept_prob", "fused_prob", "primary_top", "gate")
_STAT_DICTS = ("decisions", "forward_passes", "forward_tokens", "forward_s", "member_bytes", "member_row_bytes", "wins")
_STAT_NUMBERS = ("generated_tokens", "ensemble_steps", "et_ratio", "rounds", "latency_s", "first_token_s",
                 "tokens_per_s", "draft_tokens", "draft_discarded", "fusion_ms_mean")


def _number(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _probability(value, where: str) -> None:
    if _number(value) and not 0 <= value <= 1 + PROB_SLACK:
        raise TraceFormatError(f"{where} is {value:g}; a probability lies between 0 and 1.")


def _not_negative(value, where: str, what: str = "number") -> None:
    if _number(value) and value < 0:
        raise TraceFormatError(f"{where} is {value:g}; a {what} is not negative.")


def _pairs_probabilities(pairs, where: str) -> None:
    for j, pair in enumerate(pairs if isinstance(pairs, list) else []):
        if isinstance(pair, list) and len(pair) == 2:
            _probability(pair[1], f"{where}[{j}]'s probability")


def check_domains(data: dict) -> None:
    """Refuse values outside their real domain. Runs after the schema check: the fields it names have their types;
    free-form ones (a token's details) are checked where they hold numbers."""
    text_len = len(data["text"])
    for i, tok in enumerate(data["tokens"]):
        checkpoint()
        where = f"trace.tokens[{i}]"
        _pairs_probabilities(tok.get("topk"), f"{where}.topk")
        fusion = tok.get("fusion")
        if isinstance(fusion, dict):
            for key in ("before", "after"):
                _pairs_probabilities(fusion.get(key), f"{where}.fusion.{key}")
            for model, pairs in _items(fusion.get("per_model")):
                _pairs_probabilities(pairs, f"{where}.fusion.per_model[{model[:40]!r}]")
            for model, weight in fusion["weights"].items():
                _not_negative(weight, f"{where}.fusion.weights[{model[:40]!r}]", "weight")
            _not_negative(fusion.get("ms"), f"{where}.fusion.ms", "time")
        _check_details(tok.get("details") or {}, where, text_len)
    for i, rnd in enumerate(data["rounds"]):
        checkpoint()
        _check_round(rnd, f"trace.rounds[{i}]", text_len)
    stats = data["stats"]
    for key in _STAT_NUMBERS:
        _not_negative(stats.get(key), f"trace.stats.{key}")
    for key in _STAT_DICTS:
        for name, value in (stats.get(key) or {}).items():
            _not_negative(value, f"trace.stats.{key}[{str(name)[:40]!r}]")


def _check_details(details: dict, where: str, text_len: int) -> None:
    where = f"{where}.details"
    for key in _DETAIL_PROBS:
        _probability(details.get(key), f"{where}.{key}")
    for key in ("probs", "support"):
        for model, p in (details.get(key) if isinstance(details.get(key), dict) else {}).items():
            _probability(p, f"{where}.{key}[{str(model)[:40]!r}]")
    for model, pairs in _items(details.get("per_model_top")):
        _pairs_probabilities(pairs, f"{where}.per_model_top[{model[:40]!r}]")
    for key in ("blocked_by", "in_vocab"):  # lists of model names, joined into the per-token table
        names = details.get(key)
        if names is not None and not (isinstance(names, list) and all(isinstance(n, str) for n in names)):
            raise TraceFormatError(f"{where}.{key} must be a list of model names.")
    boundary = details.get("boundary")
    if _number(boundary) and not 0 <= boundary <= text_len:
        raise TraceFormatError(f"{where}.boundary {boundary:g} is not a place in the text (0 to {text_len:,}).")


def _check_round(rnd: dict, where: str, text_len: int) -> None:
    if not 0 <= rnd["start"] <= text_len:
        raise TraceFormatError(f"{where}.start {rnd['start']} is not a place in the text (0 to {text_len:,}).")
    models = [c["model"] for c in rnd["candidates"]]
    winner, index = rnd.get("winner"), rnd.get("winner_index")
    if winner is not None and winner not in models:
        got = f"its candidates are by {', '.join(m[:40] for m in models[:8])}" if models else "it has no candidates"
        raise TraceFormatError(f"{where}.winner {winner[:40]!r} is not one of the round's candidates ({got}).")
    if index is not None and 0 <= index < len(models) and winner is not None and models[index] != winner:
        raise TraceFormatError(f"{where}.winner_index {index} is {models[index][:40]!r}'s candidate, not the winner "
                               f"{winner[:40]!r}'s.")
    for cand in rnd["candidates"]:
        _not_negative(cand.get("tokens"), f"{where}.candidates' tokens", "count")
    for name, what in (("rewards", "probability"), ("weights_before", "weight"), ("weights_after", "weight"),
                       ("timings", "time")):
        for model, value in (rnd.get(name) or {}).items():
            if what == "probability":
                _probability(value, f"{where}.{name}[{str(model)[:40]!r}]")
            else:
                _not_negative(value, f"{where}.{name}[{str(model)[:40]!r}]", what)


# -- text -------------------------------------------------------------------------------------------------
def clean(text: str, data):
    """``(data, warning)``: the JSON ``data`` parsed from ``text`` with lone surrogates replaced (:func:`clean_text`),
    and the warning the trace gets for them (None when there were none)."""
    if not may_hold_lone_surrogates(text):
        return data, None
    data, count = clean_text(data)
    if not count:
        return data, None
    return data, (f"{count:,} text{'s' if count > 1 else ''} of this trace held characters that are not valid text "
                  "(lone UTF-16 surrogates); each is shown as \ufffd.")


def may_hold_lone_surrogates(text: str) -> bool:
    """Whether raw JSON ``text`` may hold a lone surrogate (as a character or an escape); cheap, may say yes wrongly."""
    return bool(_LONE.search(text) or _LONE_ESCAPE.search(text))


def clean_text(value):
    """``(value, n)``: the parsed JSON ``value`` with every lone surrogate in its strings and keys replaced by
    U+FFFD, and how many strings held one."""
    count = 0

    def clean(s: str) -> str:
        nonlocal count
        if _LONE.search(s) is None:
            return s
        count += 1
        return _LONE.sub("\ufffd", s)

    def walk(node, depth: int = 0):
        if isinstance(node, str):
            return clean(node)
        if isinstance(node, list):
            if depth < 2:
                checkpoint()
            return [walk(v, depth + 1) for v in node]
        if isinstance(node, dict):
            return {clean(k) if isinstance(k, str) else k: walk(v, depth + 1) for k, v in node.items()}
        return node

    return walk(value), count
