"""Checks on untrusted trace files beyond their schema: limits before parsing, consistency after.

An uploaded trace is parsed only after a linear scan has bounded its nesting depth and its number of values,
so a file of 100,000 nested lists is refused instead of recursing; numbers are bounded while parsing (no
``NaN``, no ``10**100``). After the schema check (:mod:`ensemble.trace`) the trace must also be consistent: a
known method, named models, tokens indexed 0..n-1 that tile the text in order and spell what they cover,
rounds whose score matrices fit their candidates. Every refusal is one line saying what is wrong.
"""

from __future__ import annotations

import gzip
import io
import itertools
import json
import math
import re
import zlib

from ..capabilities import METHODS
from ..errors import TraceFormatError, name_list
from .values import MAX_MODELS, MAX_PAIRS, MAX_RECORD_CHARS, MAX_ROUNDS, MAX_TOKENS, MAX_TRACE_BYTES, checkpoint

MAX_DEPTH = 32  # a real trace nests 8 deep (trace > tokens > token > details > splits > model > piece)
MAX_VALUES = 4_000_000  # values of every kind, keys included (a 20 MB trace the engine wrote holds about 2,000,000)
MAX_CONTAINERS = 1_000_000  # lists and objects (a 20 MB trace the engine wrote holds about 800,000)
MAX_NAME = 200  # characters of a model name
MAX_INT = 2**53  # integers beyond this lose precision in the browser anyway
MAX_FLOAT = 1e15

_STRING = re.compile(r'"[^"]*"')  # once escapes are gone a string holds no quote: one pass, no backtracking
_CLOSE_AS_OPEN = str.maketrans("}", "{")
_NOT_BRACKET = bytes(c for c in range(256) if c not in b"[]{}")
_DEPTH = {ord("["): 1, ord("{"): 1, ord("]"): -1, ord("}"): -1}
_BYTE_DISPLAY = re.compile(r"<0x([0-9A-F]{2})>")
# model names the engine writes beside the members': SAFE's fused replacements
ENGINE_NAMES = ("ensemble",)


def unpacked(data: bytes) -> bytes:
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

def parse(text: str):
    """``json.loads`` for untrusted text, after bounding its depth and size; numbers bounded while parsing."""
    scan(text)
    try:
        return json.loads(text, parse_int=_int, parse_float=_float, parse_constant=_constant)
    except TraceFormatError:
        raise
    except (ValueError, RecursionError) as exc:
        raise TraceFormatError(f"Trace file is not valid JSON: {str(exc).splitlines()[0][:200]}") from exc


def scan(text: str) -> None:
    """Refuse ``text`` when it nests deeper than :data:`MAX_DEPTH`, or holds more than :data:`MAX_VALUES` values or
    :data:`MAX_CONTAINERS` lists and objects (what the parser spends its time building), or a record whose lists
    and numbers outside strings run over :data:`~ensemble.trace.values.MAX_RECORD_CHARS` characters between two braces (never more than a whole record) (an 18 MB top-k list is
    refused here in a fraction of the time parsing it would take).

    Linear in the text's length whatever it holds, in passes of C string operations: escaped backslashes and
    escaped quotes are dropped first (a run of backslashes pairs up from its left, as JSON reads it), so no string
    holds a quote any more and strings are cut out by ``"[^"]*"`` a slice at a time; what is left outside strings
    is counted. (An earlier single regex re-read the rest of the text from every escaped quote of an unterminated
    string: 60 KB of ``\\"`` held the server for 15 s.) Text that is not JSON may be counted loosely here; the
    parser refuses it next.
    """
    bare = text.replace("\\\\", "").replace('\\"', "")
    strings = bare.count('"') // 2
    if strings > MAX_VALUES:
        raise TraceFormatError(f"Trace file holds more than {MAX_VALUES:,} values.")
    outside = "".join(_STRING.sub('""', part) for part in _slices(bare))
    containers = outside.count("[") + outside.count("{")
    if containers > MAX_CONTAINERS:
        raise TraceFormatError(f"Trace file holds more than {MAX_CONTAINERS:,} lists and objects.")
    if outside.count(",") + outside.count(":") + containers + 1 > MAX_VALUES:  # each value follows one of these
        raise TraceFormatError(f"Trace file holds more than {MAX_VALUES:,} values.")
    stretch = max(map(len, outside.translate(_CLOSE_AS_OPEN).split("{")))
    if stretch > MAX_RECORD_CHARS:  # 900,000 top-k pairs in one token: refused here, before seconds of parsing
        raise TraceFormatError(f"Trace file holds {stretch:,} characters of lists and numbers inside one record; a "
                               f"record holds at most {MAX_RECORD_CHARS:,} (a top-k list at most {MAX_PAIRS:,} entries).")
    brackets = left = outside.encode("utf-8", "surrogatepass").translate(None, _NOT_BRACKET)
    for _ in range(MAX_DEPTH):  # each pass drops the innermost pairs (a level or more): a real trace is gone after 8
        if not left:
            return
        left = left.replace(b"[]", b"").replace(b"{}", b"")
    if left and max(itertools.accumulate(_DEPTH[c] for c in brackets)) > MAX_DEPTH:
        raise TraceFormatError(f"Trace file nests deeper than {MAX_DEPTH} levels; a trace nests about 8.")


def _slices(bare: str, size: int = 1 << 20):
    """``bare`` (a text without escaped quotes) in pieces of about ``size`` characters, each cut outside a string,
    so that other threads run between the pieces."""
    start = 0
    while start < len(bare):
        end = min(start + size, len(bare))
        if bare.count('"', start, end) % 2:  # the cut falls inside a string: cut after its closing quote instead
            close = bare.find('"', end)
            end = len(bare) if close < 0 else close + 1
        yield bare[start:end]
        start = end


def _int(text: str) -> int:
    if len(text.lstrip("-")) > 16 or abs(int(text)) > MAX_INT:
        raise TraceFormatError(f"Trace file holds the number {text[:20]}{'…' if len(text) > 20 else ''}; "
                               f"numbers in a trace are at most {MAX_INT:,}.")
    return int(text)


def _float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value) or abs(value) > MAX_FLOAT:
        raise TraceFormatError(f"Trace file holds the number {text[:20]}; numbers in a trace are finite and at most {MAX_FLOAT:g}.")
    return value


def _constant(text: str):
    raise TraceFormatError(f"Trace file holds {text}; a trace holds only finite numbers.")


def check(trace) -> None:
    """Raise :class:`TraceFormatError` unless the (schema-checked) ``trace`` is consistent."""
    if trace.method not in METHODS:
        raise TraceFormatError(f"trace.method {trace.method[:40]!r} is not one of {', '.join(METHODS)}.")
    models = trace.models
    if not models:
        raise TraceFormatError("trace.models is empty: a trace names the models that ran.")
    if len(models) > MAX_MODELS or len(set(models)) != len(models) or any(not m or len(m) > MAX_NAME for m in models):
        raise TraceFormatError(f"trace.models must be at most {MAX_MODELS} different names of 1 to {MAX_NAME} characters.")
    if len(trace.tokens) > MAX_TOKENS or len(trace.rounds) > MAX_ROUNDS:
        raise TraceFormatError(f"Trace has {len(trace.tokens):,} tokens and {len(trace.rounds):,} rounds; the limits are "
                               f"{MAX_TOKENS:,} and {MAX_ROUNDS:,}.")
    _check_tokens(trace, set(models) | set(ENGINE_NAMES))
    _check_rounds(trace, set(models))


def _check_tokens(trace, names: set[str]) -> None:
    text, tokens = trace.text, trace.tokens
    pos = trace.fork["chars"] if trace.fork else 0  # a fork's tokens cover what it wrote after the text it kept
    group: list = []  # tokens sharing one span: the byte tokens of a character, then the token finishing it
    for i, tok in enumerate(tokens):
        checkpoint()
        where = f"trace.tokens[{i}]"
        if tok.index != i:
            raise TraceFormatError(f"{where}.index is {tok.index}; tokens are numbered 0, 1, 2, … in order.")
        if tok.model not in names:
            raise TraceFormatError(f"{where}.model {tok.model[:40]!r} is not one of the trace's models ({name_list(trace.models)}).")
        if tok.round is not None and not 0 <= tok.round < max(len(trace.rounds), 1):
            raise TraceFormatError(f"{where}.round {tok.round} is not one of the trace's {len(trace.rounds)} rounds.")
        if tok.fusion is not None and not set(tok.fusion.per_model) <= names:
            raise TraceFormatError(f"{where}.fusion names a model that is not in the trace.")
        span = (tok.start, tok.end)
        if group and span == (group[0].start, group[0].end) and tok.start < tok.end:
            group.append(tok)  # another token of the same character(s)
            continue
        _check_group(group, text)
        if tok.start != pos:
            raise TraceFormatError(f"{where} starts at {tok.start}, where the previous token ended at {pos}: "
                                   "tokens must cover the text in order, without gaps or overlaps.")
        group = [tok] if tok.start < tok.end else []
        pos = tok.end
    _check_group(group, text)
    if pos != len(text):
        raise TraceFormatError(f"The tokens cover {pos:,} of the text's {len(text):,} characters.")


def _check_group(group: list, text: str) -> None:
    """Tokens with one span spell what they cover: all but the last end inside a character (a byte token)."""
    if not group:
        return
    for tok in group[:-1]:
        if not _BYTE_DISPLAY.search(tok.text[-6:]):
            raise TraceFormatError(f"trace.tokens[{tok.index}] shares its span with the next token but is not a byte "
                                   "token of an unfinished character.")
    covered = text[group[0].start : group[0].end]
    spelled = _spell("".join(t.text for t in group))
    # A stop string may cut the last token short; a run that ended inside a character shows U+FFFD.
    if spelled != covered and not (covered and spelled.startswith(covered)) and covered != "\ufffd":
        raise TraceFormatError(f"trace.tokens[{group[-1].index}] reads {group[-1].text[:30]!r} but covers "
                               f"{covered[:30]!r} of the text.")


def _spell(display: str) -> str:
    """The text of token displays: ``<0xF0>`` and the like are bytes again."""
    if "<0x" not in display:
        return display
    data = bytearray()
    pos = 0
    for match in _BYTE_DISPLAY.finditer(display):
        data += display[pos : match.start()].encode("utf-8", "surrogatepass")
        data.append(int(match.group(1), 16))
        pos = match.end()
    data += display[pos:].encode("utf-8", "surrogatepass")
    return data.decode("utf-8", "replace")


def _check_rounds(trace, models: set[str]) -> None:
    start = 0
    for i, rnd in enumerate(trace.rounds):
        where = f"trace.rounds[{i}]"
        if rnd.index != i:
            raise TraceFormatError(f"{where}.index is {rnd.index}; rounds are numbered 0, 1, 2, … in order.")
        if rnd.start < start:  # (a stop string may cut the text before the last round's start)
            raise TraceFormatError(f"{where}.start {rnd.start} is before the previous round's start.")
        start = rnd.start
        n = len(rnd.candidates)
        named = {c["model"] for c in rnd.candidates} | set(rnd.verifiers) | set(rnd.weights_before) | set(rnd.weights_after)
        if rnd.winner is not None:
            named.add(rnd.winner)
        if not named <= models:
            raise TraceFormatError(f"{where} names a model that is not in the trace: {name_list(sorted(named - models))}.")
        if rnd.scores and (len(rnd.scores) != len(rnd.verifiers) or any(len(row) != n for row in rnd.scores)):
            raise TraceFormatError(f"{where}.scores must have one row per verifier ({len(rnd.verifiers)}) and one column "
                                   f"per candidate ({n}).")
        if rnd.aggregate and len(rnd.aggregate) != n:
            raise TraceFormatError(f"{where}.aggregate has {len(rnd.aggregate)} values for {n} candidates.")
        if rnd.winner_index is not None and not 0 <= rnd.winner_index < n:
            raise TraceFormatError(f"{where}.winner_index {rnd.winner_index} is not one of its {n} candidates.")
