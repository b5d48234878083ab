"""The results figures, table and standalone report (:mod:`visual.report`)."""

from __future__ import annotations

import pytest

import visual
from tests.visual.helpers import ROWS


def test_results_figures_and_html():
    scatter, bars = visual.results_figures(ROWS)
    assert len(scatter.data) == len(ROWS)
    assert [t.y[0] for t in scatter.data] == [r["accuracy"] for r in ROWS]
    assert scatter.data[1].error_y.array[0] == pytest.approx(0.14) and scatter.data[1].error_y.arrayminus[0] == pytest.approx(0.13)
    assert len(bars.data) == 1 and list(bars.data[0].y) == [r["mean_et"] for r in ROWS]
    html = visual.results_html(ROWS)
    assert html.count("<tr>") == len(ROWS) + 1 and "48.0% (35.0%–62.0%)" in html


def test_write_report_is_standalone(tmp_path):
    path = tmp_path / "out" / "report.html"
    visual.write_report(ROWS, path, "GSM8K <subset>", {"command": "python -m ensemble evaluate --data x.jsonl", "machine": "<b>cpu</b>"})
    html = path.read_text(encoding="utf-8")
    assert html.startswith("<!DOCTYPE html>") and html.count("<html") == 1
    assert "<script src=" not in html and 'src="http' not in html and len(html) > 1_000_000  # plotly.js inlined
    assert "&lt;b&gt;cpu&lt;/b&gt;" in html and "GSM8K &lt;subset&gt;" in html
    assert html.count('class="plotly-graph-div"') == 2
