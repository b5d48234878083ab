"""Run numbers and decisions in words, written the same way in the app, its offline pages and the command line.

E/T (ensemble steps per generated token) is a percentage with one decimal everywhere; SpecEM, which takes no
token-level ensemble step but has the models vote on every segment, says so instead of "0.0%".
"""

from __future__ import annotations

import math

from ..capabilities import CAPABILITIES, capabilities, is_one_model, is_segments

DECISION_WORDS = {
    "drafter": "drafter only",
    "consensus": "consensus",
    "oov_blocked": "blocked: tokenizer mismatch",
    "ensembled_kept": "ensembled, draft kept",
    "ensembled_replaced": "ensembled, draft replaced",
    "fused": "fused (every token)",
    "gated": "main model sure: no vote (GaC gate)",
    "segment": "SpecEM segment",
}
"""A decision's name for people (``visual.style`` draws the same labels beside its colours)."""

METHOD_DECISIONS: dict[str, tuple[str, ...]] = {name: c.decisions for name, c in CAPABILITIES.items()}


def method_decisions(method: str, settings: dict | None = None) -> tuple[str, ...]:
    """The decisions a run of ``method`` with ``settings`` can produce: GaC's gate only where a gate is on (SAFE
    with GaC fusion, GaC with a gate); without settings, all the method's."""
    decisions = METHOD_DECISIONS.get(method, tuple(d for d in DECISION_WORDS if d != "segment"))
    if isinstance(settings, dict):
        caps = capabilities(method)
        fusion = caps.fusion_for(settings.get("fusion")) if caps else settings.get("fusion")
        gate = settings.get("gac_gate") is not None and fusion == "gac"
        if not gate:
            decisions = tuple(d for d in decisions if d != "gated")
    return decisions


def plural(n: int, one: str, many: str | None = None) -> str:
    """``1 round``, ``3 rounds`` (``many`` for irregular plurals)."""
    return f"{n} {one if n == 1 else (many or one + 's')}"


def et_text(et_ratio, method: str | None = None, rounds=None) -> str:
    """E/T as people read it: ``12.0%``; for SpecEM ``votes on every segment (3 rounds)``; ``–`` when unknown."""
    if is_segments(method):
        n = rounds if isinstance(rounds, int) and not isinstance(rounds, bool) and rounds >= 0 else None
        return "votes on every segment" + (f" ({plural(n, 'round')})" if n is not None else "")
    if isinstance(et_ratio, bool) or not isinstance(et_ratio, int | float) or not math.isfinite(et_ratio):
        return "–"
    return f"{100 * et_ratio:.1f}%"


def ensembled_text(stats, method: str | None = None) -> str:
    """How many tokens, and how many of them the models voted on, plain words first and E/T after them as the
    detail: ``ensembled 3 of 40 tokens (E/T 7.5%)``; SpecEM ``40 tokens, votes on every segment (3 rounds)``; a
    single model ``40 tokens by one model (no ensemble)``. ``stats`` is a trace's :class:`~ensemble.trace.RunStats`."""
    steps, tokens = stats.ensemble_steps, stats.generated_tokens
    count = plural(tokens, "token") if isinstance(tokens, int) and not isinstance(tokens, bool) and tokens >= 0 else "the tokens"
    if is_segments(method):
        return f"{count}, {et_text(stats.et_ratio, method, stats.rounds)}"
    if is_one_model(method):
        return f"{count} by one model (no ensemble)"
    steps = steps if isinstance(steps, int) and not isinstance(steps, bool) and steps >= 0 else "some"
    return f"ensembled {steps} of {count} (E/T {et_text(stats.et_ratio, method, stats.rounds)})"


STOP_WORDS = {"eos": "the answer ended by itself", "budget": "the token budget", "stop_string": "a stop string",
              "cancelled": "stopped", "member_failed": "a member failed"}
"""Why a run stopped, for people (``RunStats.stop_reason``)."""


def decisions_text(counts) -> str:
    """Decision counts as words, most frequent first: ``consensus 30, blocked: tokenizer mismatch 4``."""
    items = [(str(k), v) for k, v in (counts.items() if isinstance(counts, dict) else []) if isinstance(v, int)]
    items.sort(key=lambda kv: -kv[1])
    return ", ".join(f"{DECISION_WORDS.get(k, k)} {v}" for k, v in items) or "none"


def _width(ch: str) -> int:
    import unicodedata

    if unicodedata.combining(ch) or ch in "\u200d\ufe0f":
        return 0
    return 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1


_SHOWN = str.maketrans({"\n": "↵", "\t": "→", "\r": "␍"})


def caret_lines(text: str, marks: dict[str, list[int]], limit: int = 120) -> list[str]:
    """The text on one line (newlines as ↵), then a line per model with a ``^`` under the first character after
    each boundary it lacks (``marks``: name -> character offsets), so nobody counts offsets by hand. Wide
    characters (CJK, emoji) take two columns; text beyond ``limit`` characters is cut with "…"."""
    shown = text[:limit]
    columns, col = [], 0
    for ch in shown:
        columns.append(col)
        col += _width(ch)
    columns.append(col)
    width = max((len(n) for n in marks), default=0)
    out = [f"{'':<{width}}  {shown.translate(_SHOWN)}{'…' if len(text) > limit else ''}"]
    for name, offsets in marks.items():
        line = [" "] * (col + 1)
        for b in offsets:
            if isinstance(b, int) and 0 < b <= len(shown):
                line[columns[b] if b < len(columns) else col] = "^"
        if "^" in line:
            out.append(f"{name:<{width}}  {''.join(line).rstrip()}")
    return out
