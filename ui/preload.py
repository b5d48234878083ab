"""Plotly ahead of the first chart: Gradio loads its Plotly module (4.6 MB of JavaScript) only when a chart is first
shown, and until it has run the chart's box shows an empty placeholder. The inspector's top-k chart appears on the
first click on a token, so that first chart stood blank for 1-2 s on a laptop and about 9 s on a busy 2-core
machine (the README's inspector screenshot caught it blank). :data:`PRELOAD_PLOTLY_JS` imports the module in idle
time after the page loads, from the same URL as Gradio's own import, so the browser runs it once and the first
chart draws at once. Nothing is fetched from outside the app: the module is one of Gradio's own assets.
"""

from __future__ import annotations

import json
from pathlib import Path


def plotly_chunk() -> str:
    """The file name of the installed Gradio's Plotly module (``PlotlyPlot-<hash>.js``), "" if it has none."""
    try:
        import gradio
    except ImportError:
        return ""
    found = sorted((Path(gradio.__file__).parent / "templates" / "frontend" / "assets").glob("PlotlyPlot-*.js"))
    return found[0].name if found else ""


PRELOAD_PLOTLY_JS = """
  // Plotly ahead of the first chart (ui/preload.py): the module Gradio imports when a chart first shows, resolved
  // against Gradio's own entry script, so the later import finds it loaded.
  (() => {
    const chunk = CHUNK, entry = document.querySelector('script[type="module"][src*="/assets/index-"]');
    if (!chunk || !entry) return;
    const load = () => import(new URL(chunk, entry.src).href).catch(() => {});
    if (window.requestIdleCallback) requestIdleCallback(load, {timeout: 3000}); else setTimeout(load, 1000);
  })();
""".replace("CHUNK", json.dumps(plotly_chunk()))
"""Statements for the page-load script (``links.KEYS_JS`` runs them)."""
