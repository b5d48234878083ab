"""The top-k and fusion figures of a token (:mod:`visual.charts`)."""

from __future__ import annotations

import visual
from tests.visual.helpers import load
from visual import charts


def test_topk_figure_bars():
    single = load("single")
    fig = visual.topk_figure(single, 0)
    assert len(fig.data) == 1 and len(fig.data[0].x) == len(single.tokens[0].topk)
    assert fig.data[0].marker.color[0] == charts.CHOSEN  # 'To' was chosen
    math = load("safe_math")
    record = next(r for r in math.tokens if r.decision == "ensembled_replaced")
    fig = visual.topk_figure(math, record.index)
    assert len(fig.data) == len(record.fusion.per_model)
    assert len({tuple(bars.y) for bars in fig.data}) == 1  # aligned: every panel has the same keys in one order
    best = {}
    for top in record.fusion.per_model.values():
        for key, p in top:
            best[key] = max(best.get(key, 0), p)
    shown = [charts.label(k) for k in sorted(best, key=lambda k: -best[k])]
    assert list(fig.data[0].y) == [k for k in shown if k in fig.data[0].y]  # ordered by the best probability
    for bars, (model, top) in zip(fig.data, record.fusion.per_model.items(), strict=True):
        drawn = dict(zip(bars.y, bars.x, strict=True))
        assert all(drawn[charts.label(k)] == p for k, p in top if charts.label(k) in drawn)
        assert charts.label(top[0][0]) in drawn  # each model's favourite is always shown
        outside = [t for y, t in zip(bars.y, bars.text, strict=True) if y not in {charts.label(k) for k, _ in top}]
        assert all(t.startswith("not in its top") for t in outside)
        assert bars.name == model
    assert fig.layout.height >= 90 + len(fig.data) * 20 * len(fig.data[0].y)  # stacked, one panel per model
    colours = {c for bars in fig.data for c in bars.marker.color}
    assert {charts.CHOSEN, charts.DRAFT} <= colours
    assert all("%{customdata}" in bars.hovertemplate for bars in fig.data)
    # a consensus token: drafter and verifiers at the boundary (details.per_model_top)
    safe_trace = load("safe")
    top = safe_trace.tokens[3].details["per_model_top"]
    fig = visual.topk_figure(safe_trace, 3)
    assert [bars.name for bars in fig.data] == list(top) == safe_trace.models
    for bars, pairs in zip(fig.data, top.values(), strict=True):
        drawn = dict(zip(bars.y, bars.x, strict=True))
        assert all(drawn[charts.label(k)] == p for k, p in pairs if charts.label(k) in drawn)
        assert bars.marker.color[0] == charts.CHOSEN and bars.text[0] == "chosen"  # everyone's favourite is " went"
    fig = visual.topk_figure(safe_trace, 5)  # the draft is " Pl"; gemma3's own next token there is " P"
    gemma = next(bars for bars in fig.data if bars.name == "gemma3")
    assert gemma.marker.color[0] == charts.CHOSEN and gemma.text[0] == "own next token"
    # only the record's own top-k: one panel, named after the record's model
    for trace, index, model in ((safe_trace, 1, "smollm2"), (load("gac"), 0, "qwen")):
        fig = visual.topk_figure(trace, index)
        assert len(fig.data) == 1 and fig.data[0].name == model
        assert list(fig.data[0].x) == [p for _, p in trace.tokens[index].topk]
    end = visual.topk_figure(safe_trace, 15)  # the end of sequence is a choice like any other
    assert end.data[0].y[0] == "&lt;eos&gt;" and end.data[0].marker.color[0] == charts.CHOSEN
    assert visual.topk_figure(load("specem"), 0) is None  # SpecEM records no top-k


def test_fusion_figure_before_and_after():
    math = load("safe_math")
    record = next(r for r in math.tokens if r.fusion is not None and r.fusion.sharpened)
    fig = visual.fusion_figure(math, record.index)
    assert len(fig.data) == 2 and fig.layout.barmode == "group"  # one chart: paired bars per key
    before, after = dict(record.fusion.before), dict(record.fusion.after)
    keys = sorted(before, key=lambda k: -before[k])[:12]
    assert list(fig.data[0].x) == [before[k] for k in keys]
    assert list(fig.data[1].x) == [after.get(k, 0.0) for k in keys]
    assert fig.data[0].text[0] == f"{before[keys[0]]:.0%}"  # value labels
    assert "(chosen + draft)" in fig.data[0].y[0]
    assert fig.layout.annotations[0].text.startswith("sharpening: ")
    unite = load("unite")
    fig = visual.fusion_figure(unite, 0)
    assert len(fig.data) == 1 and len(fig.data[0].x) == min(12, len(unite.tokens[0].fusion.before))
    assert visual.fusion_figure(load("gac"), 0) is None
