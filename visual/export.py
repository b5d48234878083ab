"""Views as one self-contained HTML file: opens offline, no external script, style or font; the inspector's data
inside.

A run's file holds its legend, strip, stats and, for every token, the inspector's explanation and tokenization
rows (clicking a token shows them, as in the app; a few lines of inline script, no library). The charts stay in
the app (they would need plotly.js). Every string from a trace is escaped by the views that make the HTML; the
inspector data sits in a ``<script type="application/json">`` with ``<``, ``>`` and ``&`` written as ``\\u003c``
and the like, so no text in it can close the script element.
"""

from __future__ import annotations

import json

from ensemble.capabilities import is_segments
from ensemble.trace import RunTrace

from .escape import safe
from .fonts import TEXT_STACK, embedded_faces
from .forks import fork_html
from .inspector import explain
from .specem import rounds_html, weights_note
from .splits import tokenization_html
from .stats import stats_html
from .strip import compare_html, strip_html, trace_legend
from .style import CSS
from .tokenizers import tokenizers_html

_PAGE_CSS = """
body { font-family: __TEXT_STACK__, var(--el-emoji); margin: 0 auto; max-width: 1100px;
  padding: 16px; color: #1f2328; background: #fff; }
@media (prefers-color-scheme: dark) { body { color: #e6e6e6; background: #111418; } }
.el-doc-meta { font-size: 13px; opacity: 0.75; }
.el-doc-panel { border: 1px solid var(--el-line); border-radius: 6px; padding: 8px 12px; margin: 10px 0; min-height: 2em; }
#el-inspector { scroll-margin-top: 8px; }
""".replace("__TEXT_STACK__", TEXT_STACK)

_INSPECT_JS = """
(() => {
  const data = JSON.parse(document.getElementById('el-data').textContent);
  const panel = document.getElementById('el-inspector');
  document.querySelector('.el-strip').addEventListener('click', (event) => {
    const token = event.target.closest('[data-i]');
    if (!token) return;
    document.querySelectorAll('.el-selected').forEach((t) => t.classList.remove('el-selected'));
    token.classList.add('el-selected');
    const entry = data[token.dataset.i];
    panel.innerHTML = entry ? entry : '';
    // The explanation below the strip comes into sight (a long strip or a phone has it off-screen).
    const box = panel.getBoundingClientRect();
    if (box.top < 0 || box.top > window.innerHeight - 64) panel.scrollIntoView({block: 'start', behavior: 'smooth'});
  });
})();
"""


def _json_in_script(value) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")


def document(title: str, body: str, data: dict | None = None, embed_fonts: bool = True) -> str:
    """A standalone page around ``body`` (already escaped HTML); ``data`` (str -> HTML) backs the inspector.
    ``embed_fonts``: the app's text font goes in (about 210 kB), so the page looks as the app does anywhere."""
    script = ""
    if data is not None:
        script = (f'<script type="application/json" id="el-data">{_json_in_script(data)}</script>'
                  f"<script>{_INSPECT_JS}</script>")
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{safe(title)}</title><style>{embedded_faces() if embed_fonts else ''}{CSS}{_PAGE_CSS}</style></head>"
        f"<body>{body}{script}</body></html>"
    )


def run_document(trace: RunTrace, embed_fonts: bool = True) -> str:
    """A run (or a fork) as one file: prompt, legend, strip, inspector on click, stats, SpecEM rounds (``embed_fonts``:
    :func:`document`'s; an evaluation report's hundreds of answer pages leave the font out)."""
    data = {str(t.index): explain(trace, t.index) + tokenization_html(trace, t.index) for t in trace.tokens}
    meta = f"{trace.method} on {', '.join(trace.models)}" + (f" · recorded {trace.created[:19]}" if trace.created else "")
    warnings = f'<p class="el-warning">{safe(" · ".join(trace.warnings))}</p>' if trace.warnings else ""
    specem = rounds_html(trace) + weights_note(trace) if is_segments(trace.method) else ""
    body = (
        f"<h1>Ensemble Lens: {safe(trace.method)}</h1><p class=\"el-doc-meta\">{safe(meta)}</p>"
        f'<h3>Prompt</h3><div class="el-doc-panel" style="white-space: pre-wrap">{safe(trace.prompt)}</div>'
        f"{warnings}{trace_legend(trace)}"
        f'<div class="el-strip">{strip_html(trace)}</div>'
        '<h3>Inspector</h3><div class="el-doc-panel el-explain" id="el-inspector">'
        '<p class="el-muted">Click a token above to see why.</p></div>'
        f"{stats_html(trace)}{specem}"
    )
    return document(f"Ensemble Lens: {trace.method} on {', '.join(trace.models)}", body, data, embed_fonts)


def compare_document(traces: dict[str, RunTrace]) -> str:
    """A comparison (the Compare tab's cards) as one file."""
    prompt = next(iter(traces.values())).prompt if traces else ""
    body = (f"<h1>Ensemble Lens: {safe(', '.join(traces))} compared</h1>"
            f'<div class="el-doc-panel" style="white-space: pre-wrap">{safe(prompt)}</div>{compare_html(traces)}')
    return document("Ensemble Lens: comparison", body)


def tokenizers_document(comparison: dict, show_ids: bool = False) -> str:
    """An aligned tokenizer view as one file (``show_ids``: with token ids and byte tokens as their own boxes)."""
    models = comparison.get("models") if isinstance(comparison, dict) else None
    names = ", ".join(map(str, models)) if isinstance(models, dict) else ""
    body = f"<h1>Ensemble Lens: tokenizations</h1><p class=\"el-doc-meta\">{safe(names)}</p>{tokenizers_html(comparison, show_ids=show_ids)}"
    return document("Ensemble Lens: tokenizations", body)


def fork_document(original: RunTrace, forked: RunTrace, comparison: dict) -> str:
    """A fork beside the run it forks, then the fork's own run (strip and inspector), as one file."""
    run = run_document(forked)
    head, _, rest = run.partition("<body>")
    return f"{head}<body>{fork_html(original, forked, comparison)}{rest}"
