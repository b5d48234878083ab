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
