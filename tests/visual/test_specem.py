"""SpecEM's views (:mod:`visual.specem`): rounds, score heatmap, weights."""

from __future__ import annotations

import visual
from ensemble.trace import RunTrace
from tests.conftest import FIXTURES
from tests.visual.helpers import load
from visual.escape import safe


def test_specem_rounds_heatmap_and_weights():
    trace = load("specem")
    html = visual.rounds_html(trace)
    assert html.count('class="el-round"') == len(trace.rounds)
    assert html.count("el-cand winner") == len(trace.rounds)
    assert safe(trace.rounds[0].candidates[0]["text"]).split()[0] in html
    for k, rnd in enumerate(trace.rounds):
        fig = visual.score_heatmap(trace, k)
        if not rnd.scores:
            assert fig is None
            continue
        z = fig.data[0].z
        assert len(z) == len(rnd.scores) and all(len(row) == len(rnd.scores[0]) for row in z)
        assert [list(row) for row in z] == rnd.scores
        assert "Natalia" in fig.data[0].customdata[0][1] if k == 0 else True
    fig = visual.weights_figure(trace)
    assert len(fig.data) == len(trace.models)
    for line, model in zip(fig.data, trace.models, strict=True):
        assert len(line.y) == len(trace.rounds) + 1
        assert line.y[0] == trace.rounds[0].weights_before[model]
        assert line.y[-1] == trace.rounds[-1].weights_after[model]
    assert visual.score_heatmap(trace, 99) is None


def test_non_specem_views_are_empty():
    for name in ("single", "safe", "unite"):
        trace = load(name)
        assert visual.rounds_html(trace) == ""
        assert visual.score_heatmap(trace, 0) is None
        assert visual.weights_figure(trace) is None


def test_specem_rounds_fold_and_explain_reward_and_weight():
    trace = RunTrace.from_json((FIXTURES / "specem.json").read_text(encoding="utf-8"))
    html = visual.rounds_html(trace)
    assert html.count('<details class="el-round"') == len(trace.rounds) >= 2
    assert html.count('<details class="el-round" open>') == 1 and html.rfind(" open>") > html.rfind('<details class="el-round">')
    assert "share of (other model&#x27;s verifier" in html or "share of (other model's verifier" in html
    assert "exp(η·reward)" in html
    fig = visual.weights_figure(trace)
    assert fig.layout.yaxis.range[0] == 0 and fig.layout.yaxis.range[1] <= 1.0
