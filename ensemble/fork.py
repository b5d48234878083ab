""""What if" forks: continue a finished run from one of its tokens with another method, and compare.

A fork keeps the response text of a trace up to a token (the tokens before it and the text they cover) and lets
a method (the drafter alone, or any ensemble method on the same models) write the rest, with the trace's own
settings unless told otherwise. The two continuations are then compared: the first character where they differ
and a word-level diff.

Which reading of "continue from token N" this is: every member re-tokenizes the kept text and runs the method
from there, exactly as members re-synchronise after a fused token inside a run (:meth:`ResponseTokens.sync`).
So a greedy fork at the run's own settings reproduces the run's text wherever each member's tokens of the kept
text are the ones its tokenizer gives that text (tested on the embedded models); a model whose own generated
spelling of the kept text was not its tokenizer's (rare) may continue differently, and so may SAFE forked in
the middle of a draft block (its blocks then start at the fork, not where the run's blocks started).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from .capabilities import CAPABILITIES, SINGLE, capabilities
from .errors import InputError
from .preflight import RunRequest, preflight
from .settings import METHODS, Settings
from .tokens.key_table import is_complete, is_control
from .trace import RunTrace

DRAFTER_ALONE = "drafter"
"""The fork method that means "the run's drafter alone" (``single`` on the drafter; SpecEM: its first model)."""

FORK_METHODS = (DRAFTER_ALONE, *METHODS)


def fork_point(trace: RunTrace, at: int) -> tuple[int, int]:
    """``(first token re-decided, characters kept)`` for a fork at the trace's token ``at``.

    ``at`` is a token's index in the trace (``data-i`` on the strip; a fork's own tokens count from 0 after the
    text it kept). At 0 the whole answer is rewritten; at ``len(tokens)`` it is only continued. A token inside a
    character split into byte tokens forks at that character's first token.
    """
    tokens = trace.tokens
    if isinstance(at, bool) or not isinstance(at, int):
        raise InputError(f"The fork point must be a token number, not {str(at)[:40]!r}.")
    if not 0 <= at <= len(tokens):
        raise InputError(f"Token #{at} is not in this run: fork at a token from #0 to #{len(tokens)}.")
    if at == len(tokens):
        return at, len(trace.text)
    while at > 0 and tokens[at - 1].start == tokens[at].start and tokens[at].start < tokens[at].end:
        at -= 1  # byte tokens of one character: the character is re-decided from its first byte
    return at, tokens[at].start


def fork_method_for(trace: RunTrace, method: str | None, force: str | None = None) -> str:
    """The fork method asked for, or the default: the drafter alone, or with a forced key the run's own method
    (the method "continuing" after the key a person chose)."""
    return method or (trace.method if force else DRAFTER_ALONE)


def fork_method(trace: RunTrace, method: str) -> tuple[str, str | None]:
    """The engine method a fork method names, and the drafter setting it runs with (``drafter`` is ``single``
    on the run's drafter, the one model :func:`member_names` loads for it)."""
    if method not in FORK_METHODS:
        raise InputError(f"Unknown fork method {str(method)[:40]!r}: use one of {', '.join(FORK_METHODS)}.")
    if method == DRAFTER_ALONE:
        return SINGLE, None  # the drafter is the one model the fork loads (member_names)
    return method, (trace.settings.get("drafter") if CAPABILITIES[method].leads_draft else None)


MAX_FORCE_CHARS = 200


def check_force(force) -> str:
    """A key to force at the fork point ("What if it had chosen this?"), checked: text of whole characters (the
    key's exact text as the top-k panels show it, which may not be a token of every model, nor of the drafter)."""
    if force is None or force == "":
        return ""
    if not isinstance(force, str) or len(force) > MAX_FORCE_CHARS:
        raise InputError(f"The key to force must be text of at most {MAX_FORCE_CHARS} characters.")
    try:
        force.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate ("\ud800"), which JSON can carry and no tokenizer takes
        raise InputError("The key to force must be valid text: it holds a lone surrogate (half of a character).") from None
    if force == "<eos>" or is_control(force):
        raise InputError("Forcing the end of the answer needs no run: the answer would simply stop at the fork point.")
    if BYTE_DISPLAY.search(force) or not is_complete(force):
        raise InputError(f"{force[:40]!r} is part of a character (a byte token): force a key of whole characters.")
    return force


def fork_settings(trace: RunTrace, method: str, at: int, **overrides) -> Settings:
    """The trace's settings for a fork by ``method`` at ``at`` ("same settings otherwise").

    What the engine resolved for the trace's own method goes back to "the method's default" when the fork runs
    another one: sharpening (heuristic for SAFE, none for the every-token methods) and the every-token
    methods' fusion name. The token budget is what the run had left at the fork (at least 1) unless given.
    """
    engine_method, drafter = fork_method(trace, method)
    data = {k: v for k, v in trace.settings.items() if k in Settings.__dataclass_fields__}
    if engine_method != trace.method:
        if data.get("sharpen") == Settings().sharpen_for(trace.method):
            data["sharpen"] = None
        own = capabilities(trace.method)
        if own is not None and own.fusion and data.get("fusion") == own.fusion:
            data["fusion"] = Settings().fusion  # the every-token method's name back to the setting's default
    data["drafter"] = drafter
    data["max_new_tokens"] = max(1, int(data.get("max_new_tokens", 128)) - at)
    data.update({k: v for k, v in overrides.items() if v is not None})
    return Settings.from_dict(data)


def member_names(trace: RunTrace, method: str) -> list[str]:
    """The models a fork loads: the trace's (an identical copy ``qwen#2`` loads ``qwen`` again); the drafter
    alone loads only the drafter."""
    names = [re.sub(r"#\d+$", "", m) for m in trace.models]
    if method == DRAFTER_ALONE:
        return [names[trace.models.index(trace.drafter or trace.models[0])]]
    return names


@dataclass
class ForkComparison:
    """Two continuations of one kept text: where they part and what differs, word by word.

    ``divergence`` is the first character (counted in the continuations) where they differ, None when they are
    equal; ``diff`` is a list of ``[op, original words, fork words]`` with op ``equal`` | ``replace`` |
    ``delete`` | ``insert``; ``coarse``: the differing middle was too long to diff word by word
    (:data:`MAX_DIFF_PAIRS`) and is one ``replace``.
    """

    kept: str
    original: str
    forked: str
    divergence: int | None
    diff: list[list[str]] = field(default_factory=list)
    coarse: bool = False

    def to_dict(self) -> dict:
        return {"kept": self.kept, "original": self.original, "forked": self.forked, "divergence": self.divergence,
                "identical": self.divergence is None, "diff": self.diff, "coarse": self.coarse}


BYTE_DISPLAY = re.compile(r"<0x[0-9A-Fa-f]{2}>")
_WORDS = re.compile(r"\s+|\w+|[^\w\s]", re.UNICODE)


def compare_continuations(original: RunTrace, forked: RunTrace) -> ForkComparison:
    """Compare the text ``original`` wrote after the fork point with what ``forked`` wrote there."""
    chars = int(forked.fork["chars"]) if forked.fork else 0
    kept = forked.text[:chars]
    if original.text[:chars] != kept:
        raise InputError("The fork does not continue this run: their texts differ before the fork point.")
    return compare_texts(original.text[chars:], forked.text[chars:], kept)


MAX_DIFF_PAIRS = 200_000
"""The word diff's cap: the words that differ (after the shared beginning and end are set aside) may make at most
this many pairs (words of one side times words of the other; 200,000 is about 450 words each). The matcher's
worst case grows faster than that product (two 450-word texts alternating two words: about half a second), so
past it the differing middle is reported as one ``replace`` and the comparison says ``coarse``."""


def compare_texts(a: str, b: str, kept: str = "") -> ForkComparison:
    """Two texts (continuations of ``kept``): the first character where they differ and a word-level diff.

    Linear in the texts' length except for the differing middle, which is diffed word by word only within
    :data:`MAX_DIFF_PAIRS` (else one coarse ``replace``)."""
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    divergence = None if a == b else n
    wa, wb = _WORDS.findall(a), _WORDS.findall(b)
    head = 0
    while head < min(len(wa), len(wb)) and wa[head] == wb[head]:
        head += 1
    tail = 0
    while tail < min(len(wa), len(wb)) - head and wa[-1 - tail] == wb[-1 - tail]:
        tail += 1
    mid_a, mid_b = wa[head:len(wa) - tail], wb[head:len(wb) - tail]
    diff = [["equal", "".join(wa[:head]), "".join(wb[:head])]] if head else []
    coarse = len(mid_a) * len(mid_b) > MAX_DIFF_PAIRS
    if coarse:
        diff.append(["replace", "".join(mid_a), "".join(mid_b)])
    elif mid_a or mid_b:
        diff += [[op, "".join(mid_a[i1:i2]), "".join(mid_b[j1:j2])]
                 for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, mid_a, mid_b, autojunk=False).get_opcodes()]
    if tail:
        diff.append(["equal", "".join(wa[len(wa) - tail:]), "".join(wb[len(wb) - tail:])])
    return ForkComparison(kept, a, b, divergence, diff, coarse)


def fork_request(trace: RunTrace, at: int, method: str | None = None, force: str | None = None,
                 settings: Settings | None = None, *, offer=None, check: bool = True, **overrides) -> RunRequest:
    """A fork's preflight (:func:`ensemble.preflight.preflight`): the run continuing ``trace`` from its token ``at``
    with ``method`` (None: :func:`fork_method_for`'s default), checked before any model loads.

    Args:
        force: a key to put at token ``at`` instead of the run's (:func:`check_force`): the fork's token 0, then
            the method continues (the "What if it had chosen this?" of a top-k panel).
        settings: default :func:`fork_settings` (the trace's, the budget it had left; ``overrides`` change them).
        offer: the app's check of the names it offers (the models of :func:`member_names`).
        check: False for a library caller with its models already loaded (the engine checks the run itself).
    """
    force = check_force(force)
    method = fork_method_for(trace, method, force)
    at, chars = fork_point(trace, at)
    engine_method, _ = fork_method(trace, method)
    settings = settings or fork_settings(trace, method, at, **overrides)
    record = {"at": at, "chars": chars, "method": trace.method, "models": list(trace.models)}
    if force:
        record["force"] = force
    names = member_names(trace, method)
    if not check:
        return RunRequest(trace.prompt, engine_method, names, names, settings, fork=record, kept=trace.text[:chars], force=force)
    return preflight(trace.prompt, engine_method, names, settings, offer=offer, copies=True, fork=record,
                     kept=trace.text[:chars], force=force)


def start_fork(models: list, trace: RunTrace, at: int, method: str = DRAFTER_ALONE, settings: Settings | None = None,
               force: str | None = None, **kwargs):
    """An :class:`~ensemble.methods.EnsembleRun` continuing ``trace`` from its token ``at`` with ``method``.

    Args:
        models: the loaded models of :func:`member_names` (in that order).
        settings, force: as :func:`fork_request`.
        kwargs: passed on to :class:`EnsembleRun` (``cancel``, ``backend``).
    """
    from .methods import EnsembleRun

    return EnsembleRun.from_request(fork_request(trace, at, method, force, settings, check=False), models, **kwargs)


def run_fork(models: list, trace: RunTrace, at: int, method: str = DRAFTER_ALONE, settings: Settings | None = None,
             force: str | None = None, **kwargs) -> tuple[RunTrace, ForkComparison]:
    """Run a fork to its end: its trace and its comparison with ``trace``."""
    return complete_fork(fork_request(trace, at, method, force, settings, check=False), models, trace, **kwargs)


def complete_fork(request: RunRequest, models: list, trace: RunTrace, advance: Callable[[Iterator], Iterator] | None = None,
                  **kwargs) -> tuple[RunTrace, ForkComparison]:
    """Run the fork of ``trace`` that ``request`` (:func:`fork_request`) describes on its loaded ``models`` to its
    end: its trace and its comparison with ``trace``. ``advance``: how its events are advanced (a server passes
    :func:`ensemble.members.home.homed`)."""
    from .methods import EnsembleRun

    job = EnsembleRun.from_request(request, models, **kwargs)
    for _ in (advance or iter)(job.events()):
        pass
    return job.trace, compare_continuations(trace, job.trace)
