"""The evaluation explorer's views: the question x method grid, and two answers side by side where they part.

Takes the engine's plain records (an opened folder and its cells, :mod:`ensemble.evaluation.explorer`; a divergence,
:mod:`ensemble.evaluation.divergence`: read by attribute, never imported here) and returns escaped HTML. Each grid
cell carries ``data-qid`` and ``data-method``: the app's click handler and the static report's script read them.
"""

from __future__ import annotations

from . import forks
from .escape import safe, whitespace
from .inspector import explain
from .splits import tokenization_html

OUTCOME_MARKS = {"right": "✓", "wrong": "✗", "error": "!", "missing": "·"}
FLAG_MARKS = {"loop": ("↻", "a phrase loop"), "corrupted": ("⌧", "corrupted characters"), "budget": ("⏱", "hit the token budget")}
QUESTION_PREVIEW = 70

EXPLORER_CSS = """
.el-grid-table { border-collapse: separate; border-spacing: 0; font-size: 13px; width: 100%; table-layout: auto; }
.el-grid-table th, .el-grid-table td { border-bottom: 1px solid var(--el-line); padding: 3px 6px; }
.el-grid-table th { font-weight: 600; text-align: center; white-space: normal; overflow-wrap: break-word; min-width: 3.2em; }
/* The grid scrolls inside its own box, both ways: the method header stays on top and the question column at the
   left, so a cell far down or far right still says which question and which method it is (a phone shows two or
   three methods at a time). Sticky cells need an opaque background. */
.el-grid-scroll { overflow: auto; max-width: 100%; max-height: min(70vh, 640px); overscroll-behavior: contain; }
.el-grid-table thead th { position: sticky; top: 0; z-index: 2; background: var(--background-fill-primary, Canvas);
  box-shadow: inset 0 -1px 0 var(--el-line); }
.el-grid-table .el-q { position: sticky; left: 0; z-index: 1; background: var(--background-fill-primary, Canvas);
  box-shadow: inset -1px 0 0 var(--el-line); text-align: left; min-width: 0; max-width: 26em; }
.el-grid-table thead th.el-q { z-index: 3; }
.el-grid-table tbody th.el-q { font-weight: normal; }
.el-q details { overflow: hidden; }
.el-q summary { list-style: none; cursor: pointer; white-space: nowrap; overflow: hidden; text-overflow: ellipsis; }
.el-q summary::-webkit-details-marker { display: none; }
.el-q details[open] summary .el-q-short { display: none; }
.el-q .el-q-full { white-space: normal; overflow-wrap: anywhere; font-weight: normal; }
.el-cell { text-align: center; cursor: pointer; white-space: nowrap; font-variant-numeric: tabular-nums; border-radius: 3px; }
.el-cell:hover, .el-cell:focus { outline: 2px solid var(--el-shared); outline-offset: -2px; }
.el-cell.el-right { background: rgba(0, 158, 115, 0.22); }
.el-cell.el-wrong { background: rgba(213, 94, 0, 0.20); }
.el-cell.el-error { background: rgba(153, 153, 153, 0.35); }
.el-cell.el-picked { outline: 3px solid currentColor; outline-offset: -3px; }
.el-cell small { opacity: 0.8; margin-left: 2px; }
.el-cell .el-gold { margin-left: 0; font-size: 10px; }
.el-cell .el-given { font-size: 12px; }
.el-results { width: 100%; }
.el-table-scroll { overflow-x: auto; max-width: 100%; }
.el-results th { white-space: normal; }
.el-parting { display: grid; grid-template-columns: repeat(auto-fit, minmax(280px, 1fr)); gap: 10px; }
.el-parting > div { border: 1px solid var(--el-line); border-radius: 6px; padding: 6px 10px; min-width: 0; }
@media (max-width: 600px) {
  /* A phone: the question column is its number and a few words (a tap opens the whole question), the rest of the
     width is the methods'. */
  .el-grid-table .el-q { max-width: 7.5em; }
  .el-grid-table th { font-size: 11px; }
  /* The summary: a card per method, a line per figure, nothing hidden off to the right. */
  .el-results, .el-results tbody, .el-results tr { display: block; width: 100%; }
  .el-results thead { display: none; }
  .el-results tr { border: 1px solid var(--el-line); border-radius: 6px; margin: 0 0 8px; padding: 4px 8px; box-sizing: border-box; }
  .el-results td, .el-results td.el-num { display: flex; justify-content: space-between; gap: 12px; border: none;
    padding: 1px 0; text-align: right; white-space: normal; overflow-wrap: anywhere; }
  .el-results td::before { content: attr(data-label); text-align: left; opacity: 0.75; }
  .el-results td:first-child { font-weight: 600; text-align: left; }
  .el-results td:first-child::before { content: none; }
}
"""


def cell_html(cell, blame: str | None = None) -> str:
    """One cell: its outcome mark, the answer given and (small) the question and the gold answer; ``blame``: the
    label of its "find the decision" button (a cell whose outcome differs from the drafter alone's)."""
    flags = "".join(f'<small title="{safe(FLAG_MARKS[f][1])}">{FLAG_MARKS[f][0]}</small>' for f in cell.flags if f in FLAG_MARKS)
    words = [cell.outcome] + [FLAG_MARKS[f][1] for f in cell.flags if f in FLAG_MARKS]
    title = f"question {cell.qid}, {cell.method}: " + ", ".join(words)
    if cell.prediction is not None or cell.gold is not None:
        title += f" (answered {cell.prediction}, gold {cell.gold})"
    if cell.outcome != "missing":
        title += "; click to open its trace" if cell.traced else "; click to read the answer"
    given = f' <span class="el-given">{safe(cell.prediction)}</span>' if cell.prediction is not None else ""
    gold = f'<br><small class="el-gold">#{int(cell.qid)} · gold {safe(cell.gold)}</small>' if cell.gold is not None else ""
    button = (f'<br><button type="button" class="el-blame" data-blame="1" title="revert the ensemble\'s decisions one at a time: '
              f'which one changed this answer">{safe(blame)}</button>') if blame else ""
    return (f'<td class="el-cell el-{safe(cell.outcome)}" tabindex="0" data-qid="{cell.qid}" data-method="{safe(cell.method)}" '
            f'data-flags="{safe(" ".join(cell.flags))}" title="{safe(title)}">{OUTCOME_MARKS.get(cell.outcome, "?")}{given}{flags}'
            f'{gold}{button}</td>')


def _breakable(method: str) -> str:
    """A method's label that a narrow column breaks after its parts ("safe-unite@ | qwen+ | smollm2"), not anywhere."""
    return safe(method).replace("@", "@<wbr>").replace("+", "+<wbr>").replace(":", ":<wbr>")


def grid_html(folder, question_ids: list[int], picked: tuple[int, str] | None = None, blame: dict | None = None) -> str:
    """The grid: a row per question in ``question_ids`` (filtered and ordered), a column per method with its
    accuracy; a note when the folder kept no traces. ``blame``: (question, method) -> the label of the cell's "find
    the decision" button."""
    blame = blame or {}
    cells = folder.cells()
    head = "".join(f'<th title="{safe(m)}">{_breakable(m)}<br><small>{100 * folder.accuracy(m):.0f}%</small></th>' for m in folder.methods)
    body = []
    for q in question_ids:
        question = folder.question(q)
        short = question if len(question) <= QUESTION_PREVIEW else question[: QUESTION_PREVIEW - 1] + "…"
        row = "".join(cell_html(cells[(q, m)], blame.get((q, m))).replace('class="el-cell', 'class="el-cell el-picked', 1)
                      if picked == (q, m) else cell_html(cells[(q, m)], blame.get((q, m))) for m in folder.methods)
        label = (f'<details><summary title="{safe(question)}"><b>{q}</b> <span class="el-q-short">{safe(short)}</span></summary>'
                 f'<span class="el-q-full">{safe(question)}</span></details>')
        body.append(f'<tr data-qid="{q}"><th scope="row" class="el-q">{label}</th>{row}</tr>')
    legend = ("✓ right · ✗ wrong · ! failed · " + " · ".join(f"{mark} {why}" for mark, why in FLAG_MARKS.values())
              + f" · {len(question_ids)} of {len(folder.question_ids)} questions shown")
    note = f'<p class="el-warning el-no-traces">{safe(folder.traces_note)}</p>' if folder.traces_note else ""
    return (f'{note}<p class="el-muted">{safe(legend)}</p><div class="el-grid-scroll"><table class="el-grid-table">'
            f'<thead><tr><th class="el-q">question</th>{head}</tr></thead><tbody>{"".join(body)}</tbody></table></div>')


def answer_html(folder, qid: int, method: str) -> str:
    """A cell's answer as text (for folders without traces, and the static report's panel)."""
    row = folder.row(qid, method)
    if row is None:
        return f'<p class="el-muted">No answer of {safe(method)} to question {qid} in this folder.</p>'
    verdict = "right" if row.get("correct") else "wrong"
    return (f'<div class="el-explain"><p><b>Question {qid}, {safe(method)}</b>: {verdict} (answered {safe(row.get("prediction"))}, '
            f'gold {safe(row.get("gold"))}; {safe(row.get("tokens"))} tokens, stop: {safe(row.get("stop_reason"))})</p>'
            f'<p class="el-muted">{safe(row.get("question"))}</p>'
            f'<div class="el-fork-side">{whitespace(str(row.get("text") or ""), False)}</div></div>')


def divergence_html(div) -> str:
    """Both answers side by side with the first difference marked, then each run's decision there: the one-line
    record and the inspector's explanation of that token with its tokenization rows."""
    a, b = div.labels
    sides = forks._side(a, div.comparison["diff"], 0, div.at, False) + forks._side(b, div.comparison["diff"], 1, div.at, False)
    lines = div.lines()
    head = f'<p><b>{safe(lines[0])}</b></p>'
    if div.at is None:
        return f'<div class="el-explain">{head}<div class="el-fork">{sides}</div></div>'
    panels = []
    for label, trace, index, line in zip(div.labels, div.traces, div.indices, lines[1:]):
        detail = (explain(trace, index) + tokenization_html(trace, index)) if index is not None else ""
        panels.append(f'<div><h4>{safe(label)}</h4><p>{safe(line)}</p>{detail}</div>')
    return (f'<div class="el-explain">{head}<div class="el-fork">{sides}</div>'
            f'<h4>What each run decided where they part</h4><div class="el-parting">{"".join(panels)}</div></div>')
