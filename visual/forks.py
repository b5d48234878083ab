"""A fork beside the run it forks: both continuations of the kept text, where they part, and a word-level diff.

Takes the comparison as plain data (``ensemble.fork.ForkComparison.to_dict()``), so this module imports nothing
from the engine but the trace. The diff is drawn with ``<del>``/``<ins>`` (struck out / underlined, not the
decision colours, which mean decisions only); the first differing character gets a bar.
"""

from __future__ import annotations

import re

from ensemble.capabilities import is_one_model
from ensemble.trace import RunTrace

from . import records as rd
from .charts import top_lists
from .escape import safe, whitespace

KEPT_PREVIEW = 160
"""Characters of the kept text shown before the continuations (the rest is elided from its start)."""


def run_label(trace: RunTrace) -> str:
    """``safe on qwen, smollm2, gemma3`` or ``drafter alone (qwen)`` for a single-model run."""
    if is_one_model(trace.method):
        return f"{trace.models[0]} alone"
    return f"{trace.method} on {', '.join(trace.models)}"


def _count(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def parting_sentence(divergence: int | None, changed: int) -> str:
    """Where two continuations part, in words: "They differ from their first character", "They part after 12
    characters", with how many stretches of words differ (proper singular and plural)."""
    if divergence is None:
        return "The fork wrote exactly what the run wrote."
    where = ("They differ from their first character" if divergence == 0
             else f"They part after {_count(divergence, 'character', 'characters')} of the continuation")
    stretches = _count(changed, "stretch of words differs", "stretches of words differ")
    return f"{where}; {stretches} (struck out: only the run has them; underlined: only the fork)."


def _side(title: str, diff: list, which: int, divergence, show_whitespace: bool) -> str:
    parts, pos, marked = [], 0, divergence is None
    for entry in diff:
        op, texts = entry[0], (str(entry[1]), str(entry[2]))
        piece = texts[which]
        if op == "equal":
            if not marked and pos + len(piece) > divergence:
                cut = divergence - pos
                parts.append(whitespace(piece[:cut], show_whitespace) + '<span class="el-fork-split" title="first difference"></span>'
                             + whitespace(piece[cut:], show_whitespace))
                marked = True
            else:
                parts.append(whitespace(piece, show_whitespace))
        elif piece:
            if not marked:
                parts.append('<span class="el-fork-split" title="first difference"></span>')
                marked = True
            tag = "del" if which == 0 else "ins"
            parts.append(f"<{tag}>{whitespace(piece, show_whitespace)}</{tag}>")
        pos += len(piece)
    if not marked:
        parts.append('<span class="el-fork-split" title="first difference: one ends here"></span>')
    return f'<div class="el-fork-side"><h4>{safe(title)}</h4>{"".join(parts)}</div>'


def fork_html(original: RunTrace, forked: RunTrace, comparison: dict, show_whitespace: bool = False) -> str:
    """Both continuations side by side: the original run's (struck-out words it has and the fork lacks) and the
    fork's (underlined words only it has), the first difference marked, with one line saying what was forked."""
    fork = forked.fork or {}
    at = rd.integer(fork.get("at")) or 0
    kept = str(comparison.get("kept", ""))
    preview = kept if len(kept) <= KEPT_PREVIEW else "…" + kept[-KEPT_PREVIEW:]
    divergence = rd.integer(comparison.get("divergence"))
    diff = [d for d in comparison.get("diff", []) if isinstance(d, (list, tuple)) and len(d) == 3]
    verdict = parting_sentence(divergence, sum(1 for d in diff if d[0] != "equal"))
    force = fork.get("force")
    how = (f', with the key <code class="el-key">{whitespace(force, True, breaks=False)}</code> forced there, '
           if isinstance(force, str) and force else ": ")
    head = (f'<p>Forked at token #{at}{how}<b>{safe(run_label(forked))}</b> continued the text of '
            f'<b>{safe(run_label(original))}</b> from there. {safe(verdict)}</p>'
            f'<p class="el-muted">Kept text: <span class="el-kept">{whitespace(preview, show_whitespace)}</span></p>')
    sides = (_side(f"the run ({run_label(original)})", diff, 0, divergence, show_whitespace)
             + _side(f"the fork ({run_label(forked)})", diff, 1, divergence, show_whitespace))
    return f'<div class="el-explain">{head}<div class="el-fork">{sides}</div></div>'


_BYTE_KEY = re.compile(r"<0x[0-9A-Fa-f]{2}>")
MAX_WHATIF_KEYS = 12


def whatif_html(trace: RunTrace, index) -> str:
    """"What if it had chosen this?" under the top-k panels: every key of the models' top-k at token ``index``
    (but the one chosen) as a button; a click forks the answer with that key forced at this token and the run's
    method going on (``data-key`` holds the key's exact text). "" when the token has no top-k."""
    record = rd.find_record(trace, index)
    if record is None:
        return ""
    per_model = top_lists(record)[0]
    chosen = trace.text[record.start : record.end] or record.text
    best: dict[str, float] = {}
    for top in per_model.values():
        for key, p in top:
            if key != chosen and key not in rd.END_TEXTS and not _BYTE_KEY.search(key) and key.strip("\ufffd"):
                best[key] = max(best.get(key, 0.0), rd.number(p) or 0.0)
    keys = sorted(best, key=lambda k: -best[k])[:MAX_WHATIF_KEYS]
    if not keys:
        return ""
    method = "the drafter" if is_one_model(trace.method) else trace.method
    buttons = "".join(f'<button type="button" class="el-whatif-key" data-key="{safe(k)}" title="fork with {safe(k)} '
                      f'forced here">{whitespace(k, True, breaks=False)}</button>' for k in keys)
    return (f'<div class="el-whatif"><p><b>What if it had chosen this?</b> Click a key: the answer forks at token '
            f'#{int(record.index)} with that key instead of {whitespace(chosen, True, breaks=False)}, and '
            f'{safe(method)} goes on with the same models and settings.</p><div class="el-whatif-keys">{buttons}</div></div>')
