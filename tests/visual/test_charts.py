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
        assert bars.marker.color[0] == charts.CHOSEN and bars.text[0].endswith("% · chosen")  # everyone's favourite: " went"
    fig = visual.topk_figure(safe_trace, 5)  # the draft is " Pl"; gemma3's own next token there is " P"
    gemma = next(bars for bars in fig.data if bars.name == "gemma3")
    assert gemma.marker.color[0] == charts.CHOSEN and gemma.text[0].endswith("% · own next token")
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


def test_a_key_outside_a_models_top_k_has_no_bar_and_says_so():
    """Issue 39: a key "not in its top 10" was drawn as a 0-length bar at 0 beside short unlabelled bars, so it read
    as 0%. It has no bar (0 long) and a faint italic "not in its top k" (with its marks), and every real bar
    is labelled with its value ("<1%" for the smallest), so the two never look alike."""
    import re

    math = load("safe_math")
    record = math.tokens[27]  # "." replaced " and": qwen had no "." in its top 10, yet "." was chosen
    fig = visual.topk_figure(math, 27)
    qwen = next(bars for bars in fig.data if bars.name == "qwen")
    top = dict(record.fusion.per_model["qwen"])
    missing = [i for i, y in enumerate(qwen.y) if y not in {charts.label(k) for k in top}]
    assert missing and charts.label(".") in [qwen.y[i] for i in missing]
    for i, (x, text) in enumerate(zip(qwen.x, qwen.text, strict=True)):
        if i in missing:
            assert x == 0 and text.startswith(f"not in its top {len(top)}"), (x, text)
            assert qwen.textfont.style[i] == "italic" and qwen.textfont.color[i] == charts.ABSENT
        else:
            assert re.match(r"(<1|\d+)%", text), text
            assert qwen.textfont.style[i] == "normal"
    assert qwen.text[qwen.y.index(charts.label("."))] == f"not in its top {len(top)} · chosen"
