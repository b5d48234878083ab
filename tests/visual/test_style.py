"""The legend and the colours (:mod:`visual.style`): decisions, models and chart marks kept apart."""

from __future__ import annotations

import re

import visual
from ensemble.trace import RunTrace
from tests.conftest import FIXTURES
from visual import charts


def test_legend_lists_what_the_method_can_produce():
    def classes(html):
        return re.findall(r'class="el-swatch ([^"]+)"', html)

    safe = visual.legend_html("safe", ["a", "b"])
    assert classes(safe) == ["consensus", "consensus confident", "oov_blocked", "gated", "ensembled_kept", "ensembled_replaced", "drafter"]
    assert "consensus: unanimous" in safe and "consensus: confident on average" in safe
    assert classes(visual.legend_html("gac", ["a", "b"])) == ["fused", "gated"]
    assert classes(visual.legend_html("single", ["a"])) == ["drafter"]
    specem = visual.legend_html("specem", ["qwen", "smollm2", "gemma3"])
    assert classes(specem) == ["model-0", "model-1", "model-2"] and "smollm2" in specem
    assert ".el-tok.consensus.confident" in visual.CSS
    for decision in ("consensus", "oov_blocked", "ensembled_kept", "ensembled_replaced", "fused", "gated", "drafter", "model-0", "model-15"):
        assert f".el-tok.{decision}" in visual.CSS


def test_model_rows_and_chart_marks_do_not_wear_decision_colours():
    from visual.style import DECISION_STYLE

    trace = RunTrace.from_json((FIXTURES / "safe.json").read_text(encoding="utf-8"))
    decision_colours = {c.lower() for c, *_ in DECISION_STYLE.values()}
    assert not {charts.CHOSEN.lower(), charts.DRAFT.lower(), charts.OTHER.lower()} & decision_colours
    for t in trace.tokens:
        rows = visual.tokenization_html(trace, t.index)
        assert "model-" not in rows  # the tokenization rows name their model; their boxes are neutral
    aligned = visual.tokenizers_html({"text": "Sofia", "models": {
        "a": {"tokens": [{"text": "S", "start": 0, "end": 1}, {"text": "ofia", "start": 1, "end": 5}], "count": 2, "missing": []},
        "b": {"tokens": [{"text": "Sofia", "start": 0, "end": 5}], "count": 1, "missing": [1]}},
        "shared_boundaries": [0, 5], "all_boundaries": [0, 1, 5], "agreement": 66.7})
    assert "Sofia" in aligned.replace("</span>", "") or "ofia" in aligned
    assert "model-" not in aligned


def test_specem_model_colours_are_no_decision_colours():
    """Issue 39: SpecEM painted smollm2's segments in the blocked colour (the model palette was the decisions' own).
    Each model colour, as a 0.24 tint on a light and a dark page (what a token's background paints) and solid (its
    underline), stays as far from every decision colour as the closest decision tints are from each other; the
    first three models (a trace's usual number) stay as far apart."""
    from tests.visual.helpers import delta_e, painted
    from visual.style import DECISION_STYLE, MODEL_COLOURS

    decisions = [c for c, *_ in DECISION_STYLE.values()]
    for page in ((255, 255, 255), (11, 15, 25)):
        for model in MODEL_COLOURS:
            for decision in decisions:
                assert delta_e(painted(model, 0.24, page), painted(decision, 0.24, page)) >= 9, (model, decision, page)
                assert delta_e(painted(model), painted(decision)) >= 25, (model, decision)
        for i, a in enumerate(MODEL_COLOURS[:3]):
            for b in MODEL_COLOURS[i + 1 : 3]:
                assert delta_e(painted(a, 0.24, page), painted(b, 0.24, page)) >= 9, (a, b, page)
    specem = visual.legend_html("specem", ["qwen", "smollm2", "gemma3"])
    assert "Winning model of each round" in specem and "not decisions" in specem  # the legend says what they mean
    assert not any(f"el-swatch {d}" in specem for d in DECISION_STYLE)
