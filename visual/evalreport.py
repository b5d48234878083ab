"""The explorer in ``report.html``: the question x method grid with its filters and order (a few lines of inline
script, no library), a click on a cell showing that answer (its text; with traces, a link to the answer's own page
with its strip and inspector, :func:`visual.export.run_document`), and the decision statistics.

The filters' question lists are computed here (by the engine's :func:`filter_questions`) and embedded as JSON, so
the page shows exactly what the app shows.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote

from .escape import safe
from .evalstats import stats_figures, stats_html
from .explorer import EXPLORER_CSS, answer_html, grid_html
from .export import run_document

if TYPE_CHECKING:
    from ensemble.evaluation.explorer import Folder

ANSWERS = "answers"

_GRID_JS = """
(() => {
  const views = JSON.parse(document.getElementById('el-grid-views').textContent);
  const answers = JSON.parse(document.getElementById('el-answers').textContent);
  const body = document.querySelector('.el-grid-table tbody');
  const rows = {};
  body.querySelectorAll('tr[data-qid]').forEach((tr) => { rows[tr.dataset.qid] = tr; });
  const pick = (id) => document.getElementById(id);
  function show() {
    const key = [pick('el-filter').value, pick('el-ensemble').value, pick('el-order').value].join('|');
    const order = views[key] || [];
    Object.values(rows).forEach((tr) => { tr.hidden = true; });
    order.forEach((q) => { const tr = rows[q]; if (tr) { tr.hidden = false; body.appendChild(tr); } });
    pick('el-shown').textContent = order.length + ' question(s) shown';
  }
  ['el-filter', 'el-ensemble', 'el-order'].forEach((id) => pick(id).addEventListener('change', show));
  body.addEventListener('click', (event) => {
    const cell = event.target.closest('[data-method]');
    if (!cell) return;
    body.querySelectorAll('.el-picked').forEach((c) => c.classList.remove('el-picked'));
    cell.classList.add('el-picked');
    pick('el-answer').innerHTML = answers[cell.dataset.qid + '|' + cell.dataset.method] || '';
  });
  show();
})();
"""


def _json_in_script(value) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")


def _select(element_id: str, label: str, options: list[tuple[str, str]]) -> str:
    opts = "".join(f'<option value="{safe(v)}">{safe(t)}</option>' for v, t in options)
    return f'<label>{safe(label)} <select id="{element_id}">{opts}</select></label> '


def answer_page(method: str, qid: int) -> str:
    """The answer page's path relative to the report (``answers/<method folder>/<qid>.html``)."""
    from ensemble.evaluation.traces import method_folder

    return f"{ANSWERS}/{method_folder(method)}/{int(qid)}.html"


ANSWER_PAGES = ("disagree", "all", "none")
"""Which answers get their own page: those of the questions where the methods disagree (the default: a page holds
every token's explanation, some hundred kB for a long answer), every answer, or none."""


def explorer_sections(folder: Folder, stats: dict, out: str | Path | None = None, pages: str = "disagree") -> tuple[str, list]:
    """(HTML of the grid, its panel and the statistics' tables; the statistics' figures). With ``out``, the traced
    answers ``pages`` names (:data:`ANSWER_PAGES`) get their own page under ``out/answers/``, linked from their panel."""
    from ensemble.evaluation.explorer import FILTERS, SORTS, filter_questions

    ensembles = folder.ensembles() or [""]
    views = {f"{k}|{e}|{s}": filter_questions(folder, k, e or None, s) for k in FILTERS for e in ensembles for s in SORTS}
    paged = set(folder.question_ids if pages == "all" else filter_questions(folder, "disagree") if pages == "disagree" else [])
    answers = {}
    for (q, m), cell in folder.cells().items():
        if cell.outcome == "missing":
            continue
        link = ""
        trace = folder.readable_trace(q, m) if cell.traced and out is not None and q in paged else None
        if trace is not None:
            page = Path(out) / answer_page(m, q)
            page.parent.mkdir(parents=True, exist_ok=True)
            page.write_text(run_document(trace), encoding="utf-8")
            link = (f'<p><a href="{safe(quote(answer_page(m, q)))}" target="_blank" rel="noopener">Open this answer\'s strip and '
                    "inspector (click any token for why)</a></p>")
        answers[f"{q}|{m}"] = link + answer_html(folder, q, m)
    controls = (_select("el-filter", "Show", list(FILTERS.items()))
                + _select("el-ensemble", "ensemble", [(e, e or "–") for e in ensembles])
                + _select("el-order", "order by", list(SORTS.items())) + '<span id="el-shown" class="el-muted"></span>')
    best = folder.best_single()
    grid = (f"<h2>Every answer: question × method</h2>"
            f'<p class="el-muted">Best single model: {safe(best or "none")}. Click a cell to read that answer.</p>'
            f'<p>{controls}</p>{grid_html(folder, folder.question_ids)}'
            '<div class="el-doc-panel" id="el-answer"><p class="el-muted">Click a cell above.</p></div>'
            f'<script type="application/json" id="el-grid-views">{_json_in_script(views)}</script>'
            f'<script type="application/json" id="el-answers">{_json_in_script(answers)}</script>'
            f"<script>{_GRID_JS}</script>")
    statistics = "<h2>Decision statistics</h2>" + (stats_html(stats) if folder.has_traces else
                                                    f'<p class="el-muted">{safe(folder.traces_note)}</p>')
    figures = stats_figures(stats) if folder.has_traces else []
    return f"<style>{EXPLORER_CSS}</style>{grid}{statistics}", figures
