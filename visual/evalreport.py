"""The explorer in ``report.html``: the question x method grid with its filters and order (a few lines of inline
script, no library), a click on a cell showing that answer (its text; with traces, a link to the answer's own page
with its strip and inspector, :func:`visual.export.run_document`), and the decision statistics.

The filters' question lists come from the engine (:func:`ensemble.evaluation.explorer.filter_questions`, called by
the command line) and are embedded as JSON, so the page shows exactly what the app shows.
"""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import quote

from ensemble.errors import OutputError
from ensemble.files import write_output

from .blame import BLAME_CSS, blame_figure, blame_table_html
from .escape import safe
from .evalstats import stats_figures, stats_html
from .explorer import EXPLORER_CSS, answer_html, grid_html
from .export import run_document

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
    """The answer page's path relative to the report (``answers/<method quoted for file names>/<qid>.html``)."""
    return f"{ANSWERS}/{quote(method, safe='-_.') or '%20'}/{int(qid)}.html"


ANSWER_PAGES = ("none", "disagree", "all")
"""Which answers get their own page: none (the default: a page holds every token's explanation, 0.4-0.5 MB at 64
tokens), those of the questions where the methods disagree, or every answer."""


def _write_page(out: Path, relative: str, html: str) -> None:
    """Write an answer page under ``out``, never through a symbolic link: a linked ``answers`` folder (or method
    folder) is refused, and a linked page file is replaced by the page (written beside it, then renamed)."""
    folder = out
    for part in Path(relative).parent.parts:
        folder = folder / part
        if folder.is_symlink():
            raise OutputError(f"{Path(relative).parent.parts[0]}/ of the evaluation folder is or holds a symbolic link; "
                              "answer pages are never written through one (remove it, or use --answer-pages none).")
        folder.mkdir(exist_ok=True)
    write_output(out / relative, html)


def explorer_sections(folder, stats: dict, views: dict[str, list[int]], filters: dict[str, str], sorts: dict[str, str],
                      out: str | Path | None = None, paged: set[int] | frozenset = frozenset(),
                      blame_rows: list[dict] | None = None) -> tuple[str, list]:
    """(HTML of the grid, its panel and the statistics' tables; the statistics' figures).

    Args:
        folder: the opened evaluation folder (``ensemble.evaluation.explorer.Folder``).
        stats: its decision statistics (``ensemble.evaluation.decision_stats.decision_stats``).
        views: ``"filter|ensemble|order"`` -> the questions shown, in order (the engine's ``filter_questions``).
        filters, sorts: the filters' and orders' keys and labels.
        out: the folder to write answer pages into; ``paged``: the questions whose traced answers get one.
        blame_rows: the attribution table (``ensemble.evaluation.blame_store.blame_table``): which decision changed
            the answers, over the dataset.
    """
    ensembles = folder.ensembles() or [""]
    answers = {}
    for (q, m), cell in folder.cells().items():
        if cell.outcome == "missing":
            continue
        link = ""
        trace = folder.readable_trace(q, m) if cell.traced and out is not None and q in paged else None
        if trace is not None:
            _write_page(Path(out), answer_page(m, q), run_document(trace, embed_fonts=False))  # hundreds of pages: no font copy in each
            link = (f'<p><a href="{safe(quote(answer_page(m, q)))}" target="_blank" rel="noopener">Open this answer\'s strip and '
                    "inspector (click any token for why)</a></p>")
        answers[f"{q}|{m}"] = link + answer_html(folder, q, m)
    controls = (_select("el-filter", "Show", list(filters.items()))
                + _select("el-ensemble", "ensemble", [(e, e or "–") for e in ensembles])
                + _select("el-order", "order by", list(sorts.items())) + '<span id="el-shown" class="el-muted"></span>')
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
    if blame_rows:
        statistics += "<h2>Which decision changed the answer</h2>" + blame_table_html(blame_rows)
        chart = blame_figure(blame_rows)
        if chart is not None:
            figures.append(chart)
    return f"<style>{EXPLORER_CSS}{BLAME_CSS}</style>{grid}{statistics}", figures
