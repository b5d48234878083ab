"""The evaluation report: accuracy against cost per method, E/T per method, and a standalone HTML file.

Summary rows are dicts with the keys ``method, n, correct, accuracy, ci_low, ci_high, mean_et, tokens_per_s,
s_per_question, corruption_rate, mean_tokens`` and, in newer summaries, ``loop_rate, budget_rate`` (accuracy, its
interval and the rates as fractions in [0, 1]; a missing value shows as "–").
"""

from __future__ import annotations

from pathlib import Path

import plotly.graph_objects as go

from . import records as rd
from .charts import hover_table, label, style, unique
from .escape import safe
from .numbers import number_text
from .style import CSS, model_colour

COLUMNS = [
    ("method", "method", None),
    ("n", "questions", 0),
    ("correct", "correct", 0),
    ("accuracy", "accuracy (95% CI)", None),
    ("mean_et", "mean E/T", 3),
    ("tokens_per_s", "tokens/s", 2),
    ("s_per_question", "s / question", 2),
    ("corruption_rate", "corruption rate", 3),
    ("loop_rate", "phrase-loop rate", 3),
    ("budget_rate", "budget reached", 3),
    ("mean_tokens", "mean tokens", 1),
]


def _pct(value) -> str:
    return number_text(value, 1, suffix="%", scale=100)


def _cell(row: dict, key: str, digits: int | None) -> str:
    if key == "method":
        return safe(row.get("method", ""))
    if key == "accuracy":
        interval = ""
        if rd.number(row.get("ci_low")) is not None and rd.number(row.get("ci_high")) is not None:
            interval = f" ({_pct(row['ci_low'])}–{_pct(row['ci_high'])})"
        return _pct(row.get("accuracy")) + interval
    v = rd.number(row.get(key))
    if v is None:
        return "–" if row.get(key) is None else safe(row.get(key))
    return f"{int(v)}" if digits == 0 else f"{v:.{digits}f}"


def results_html(rows: list[dict]) -> str:
    """The summary rows as an HTML table."""
    head = "".join(f'<th class="{"" if key == "method" else "el-num"}">{safe(title)}</th>' for key, title, _ in COLUMNS)
    body = "".join(
        "<tr>"
        + "".join(f'<td class="{"" if key == "method" else "el-num"}" data-label="{safe(title)}">{_cell(row, key, digits)}</td>'
                  for key, title, digits in COLUMNS)
        + "</tr>"
        for row in rows
        if isinstance(row, dict)
    )
    # in a box that scrolls sideways when the table is wider than its box; on a phone each row is a card of labelled
    # lines (``data-label``, visual.explorer's stylesheet), so no column is hidden off to the right
    return (f'<div class="el-table-scroll" style="overflow-x: auto; max-width: 100%">'
            f'<table class="el-table el-results"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>')


def _hover(row: dict) -> str:
    return hover_table(
        [
            ("method", label(row.get("method"), glyphs=False)),
            ("accuracy", _cell(row, "accuracy", None)),
            ("correct", f"{_cell(row, 'correct', 0)} / {_cell(row, 'n', 0)}"),
            ("s/question", _cell(row, "s_per_question", 2)),
            ("mean E/T", _cell(row, "mean_et", 3)),
            ("tokens/s", _cell(row, "tokens_per_s", 2)),
            ("phrase loops", _pct(row.get("loop_rate"))),
        ]
    )


def results_figures(rows: list[dict]) -> list[go.Figure]:
    """[accuracy (95% interval) against seconds per question, one trace per method; mean E/T per method]."""
    rows = [r for r in rows if isinstance(r, dict)]
    names = unique([label(r.get("method"), glyphs=False) for r in rows])
    scatter = go.Figure()
    for i, (name, row) in enumerate(zip(names, rows)):
        acc, low, high = (rd.number(row.get(k)) for k in ("accuracy", "ci_low", "ci_high"))
        error = None
        if acc is not None and low is not None and high is not None:
            error = dict(type="data", array=[max(high - acc, 0)], arrayminus=[max(acc - low, 0)], visible=True)
        scatter.add_trace(
            go.Scatter(
                x=[rd.number(row.get("s_per_question"))],
                y=[acc],
                error_y=error,
                mode="markers",  # names in the legend: labels beside close points overlapped
                name=name,
                marker=dict(size=12, color=model_colour(i), symbol=["circle", "square", "diamond", "triangle-up", "x"][i % 5]),
                customdata=[_hover(row)],
                hovertemplate="%{customdata}<extra></extra>",
            )
        )
    scatter.update_xaxes(title_text="seconds per question", rangemode="tozero")
    scatter.update_yaxes(title_text="accuracy (95% interval)", tickformat=".0%", rangemode="tozero")
    style(scatter, 420, "Accuracy against time per question")
    scatter.update_layout(showlegend=True, legend=dict(orientation="h", y=-0.2, x=0))
    bars = go.Figure(
        go.Bar(
            x=names,
            y=[rd.number(r.get("mean_et")) for r in rows],
            marker_color="#CC79A7",
            customdata=[_hover(r) for r in rows],
            hovertemplate="%{customdata}<extra></extra>",
            name="mean E/T",
        )
    )
    bars.update_yaxes(title_text="ensemble steps per token", rangemode="tozero")
    style(bars, 360, "Mean E/T per method")
    return [scatter, bars]


_REPORT_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif, var(--el-emoji); margin: 24px auto; max-width: 1100px;
  padding: 0 16px; color: #222; background: #fff; }
@media (prefers-color-scheme: dark) { body { color: #e6e6e6; background: #16181d; } }
h1 { font-size: 1.5em; }
.el-meta td:first-child { opacity: 0.75; }
"""


def report_document(rows: list[dict], title: str, meta: dict, extra_html: str = "", extra_figures: list | None = None) -> str:
    """ONE standalone HTML file: header with ``meta``, the results table, both figures (plotly.js inlined,
    so it opens offline); then ``extra_html`` (the explorer, :mod:`visual.evalreport`) and its figures."""
    figures = results_figures(rows) + list(extra_figures or [])
    plots = [fig.to_html(full_html=False, include_plotlyjs=(i == 0), config={"displaylogo": False}) for i, fig in enumerate(figures)]
    meta_rows = "".join(f"<tr><td>{safe(k)}</td><td>{safe(v)}</td></tr>" for k, v in (meta or {}).items())
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        '<meta name="viewport" content="width=device-width, initial-scale=1"><meta name="color-scheme" content="light dark">'
        f"<title>{safe(title)}</title><style>{CSS}{_REPORT_CSS}</style></head><body>"
        f"<h1>{safe(title)}</h1>"
        + (f'<table class="el-table el-meta">{meta_rows}</table>' if meta_rows else "")
        + f"<h2>Results</h2>{results_html(rows)}"
        + "".join(f"<section>{p}</section>" for p in plots[:2])
        + extra_html
        + "".join(f"<section>{p}</section>" for p in plots[2:])
        + "</body></html>\n"
    )


def write_report(rows: list[dict], path, title: str, meta: dict, extra_html: str = "", extra_figures: list | None = None) -> None:
    """Write :func:`report_document` to ``path`` (its folder made if needed). The command line writes the
    document through its atomic writer instead (``ensemble.files``)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(report_document(rows, title, meta, extra_html, extra_figures), encoding="utf-8")
