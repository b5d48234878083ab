"""The token strip and the compare cards (:mod:`visual.strip`) on the golden traces."""

from __future__ import annotations

import re

import visual
from ensemble.trace import RunTrace, TokenRecord
from tests.conftest import FIXTURES
from tests.visual.helpers import groups_of, load, parse_strip, unglyph
from visual.strip import ZERO_WIDTH_MARKER


def test_stream_chunks_concatenate_to_strip(trace):
    expected = visual.strip_html(trace)
    for size in (1, 3, 7):
        builder = visual.StripBuilder(trace.method, trace.models)
        chunks = []
        for k in range(0, len(trace.tokens), size):
            batch = trace.tokens[k : k + size]
            so_far = trace.text[: max(r.end for r in trace.tokens[: k + size])]
            chunks.append(builder.add(batch, so_far))
        assert "".join(chunks) == expected
    plain = visual.StripBuilder(trace.method, trace.models, show_whitespace=False)
    assert plain.add(trace.tokens, trace.text) == visual.strip_html(trace, show_whitespace=False)


def test_every_group_once_in_order(trace):
    groups = groups_of(trace)
    for show in (True, False):
        spans = parse_strip(visual.strip_html(trace, show_whitespace=show))
        assert [int(s["attrs"]["data-i"]) for s in spans] == [g[0].index for g in groups]
        # zero-width records (the end-of-sequence token) render as a marker, not as text
        texts = [s["text"] if not show else unglyph(s["text"]) for s in spans if "zw" not in s["attrs"]["class"].split()]
        assert "".join(texts) == trace.text
        for span, group in zip(spans, groups, strict=True):
            first = group[0]
            assert first.decision in span["attrs"]["class"].split()
            if first.start == first.end:
                assert "zw" in span["attrs"]["class"].split()
                continue
            assert (unglyph(span["text"]) if show else span["text"]) == trace.text[first.start : first.end]
            assert span["attrs"]["title"].startswith(f"#{first.index} ")


def test_data_i_are_valid_indices(trace):
    for span in parse_strip(visual.strip_html(trace)):
        i = int(span["attrs"]["data-i"])
        assert 0 <= i < len(trace.tokens) and trace.tokens[i].index == i


def test_specem_strip_colours_by_winning_model():
    trace = load("specem")
    spans = parse_strip(visual.strip_html(trace))
    by_index = {r.index: r for r in trace.tokens}
    for span in spans:
        record = by_index[int(span["attrs"]["data-i"])]
        classes = span["attrs"]["class"].split()
        assert f"model-{trace.models.index(record.model)}" in classes and "segment" in classes
    starts = [s for s in spans if "round-start" in s["attrs"]["class"].split()]
    assert len(starts) == len({r.round for r in trace.tokens}) - 1


def _byte_trace() -> RunTrace:
    """'Hi 🙂' + a control token + '!': the emoji as four byte tokens sharing one character's span."""
    text = "Hi \U0001f642!"
    tokens = [
        TokenRecord(0, "Hi", 0, 2, "qwen", "drafter"),
        TokenRecord(1, " ", 2, 3, "qwen", "drafter"),
        *[TokenRecord(2 + k, f"<0x{b:02X}>", 3, 4, "qwen", "drafter") for k, b in enumerate(b"\xf0\x9f\x99\x82")],
        TokenRecord(6, "<control>", 4, 4, "qwen", "drafter", details={"control_token": True}),
        TokenRecord(7, "!", 4, 5, "qwen", "drafter", topk=[["!", 0.9], [".", 0.05]]),
    ]
    return RunTrace(method="single", models=["qwen"], settings={}, prompt="p", text=text, tokens=tokens)


def test_byte_tokens_render_once_and_zero_width_as_marker():
    trace = _byte_trace()
    html = visual.strip_html(trace, show_whitespace=False)
    spans = parse_strip(html)
    assert [int(s["attrs"]["data-i"]) for s in spans] == [0, 1, 2, 6, 7]
    assert html.count("\U0001f642") == 1
    assert "bytes" in spans[2]["attrs"]["class"].split() and spans[2]["text"] == "\U0001f642"
    marker = spans[3]
    assert "zw" in marker["attrs"]["class"].split() and marker["text"] == ZERO_WIDTH_MARKER
    assert "eos" not in marker["attrs"]["class"].split()  # a control token is not the end of the answer
    # streamed one record at a time, the character is still drawn once and the chunks add up
    builder = visual.StripBuilder("single", ["qwen"], show_whitespace=False)
    assert "".join(builder.add([r], trace.text) for r in trace.tokens) == html
    assert "4 byte tokens" in visual.explain(trace, 2)
    assert "&lt;0xF0&gt;" in visual.explain(trace, 2)
    assert "control token" in visual.explain(trace, 6)


def test_a_confident_consensus_is_drawn_apart_from_a_unanimous_one():
    """"Consensus" is what the legend says the verifiers agree; a consensus only on the mean is styled and named
    apart, with the mean in its tooltip."""
    trace = RunTrace.from_json((FIXTURES / "safe_math.json").read_text(encoding="utf-8"))
    html = visual.strip_html(trace)
    confident = [t for t in trace.tokens if t.decision == "consensus" and t.condition == "confident"]
    unanimous = [t for t in trace.tokens if t.decision == "consensus" and t.condition == "unanimous"]
    assert confident and unanimous
    for t in confident:
        span = re.search(rf'<span class="([^"]+)" data-i="{t.index}" title="([^"]+)"', html)
        assert span.group(1).split() == ["el-tok", "consensus", "confident"]
        assert "consensus: confident on average" in span.group(2) and "mean p" in span.group(2)
    span = re.search(rf'<span class="([^"]+)" data-i="{unanimous[0].index}" title="([^"]+)"', html)
    assert span.group(1).split() == ["el-tok", "consensus"] and "consensus: unanimous" in span.group(2)


def test_compare_cards_name_a_single_model_and_mark_where_the_runs_part():
    single, unite = load("single"), load("unite")
    html = visual.compare_html({"single": single, "unite": unite})
    assert f"<h4>single ({single.models[0]})</h4>" in html and 'data-run="unite"' in html
    at = visual.first_divergence([single.text, unite.text])
    assert at is not None and single.text[:at] == unite.text[:at] and single.text[at:at + 1] != unite.text[at:at + 1]
    assert html.count('class="el-fork-split"') == 2 and f"agree on their first {at} character" in html
    same = visual.compare_html({"a": single, "b": single})
    assert "el-fork-split" not in same and "The runs wrote identical texts" in same
    assert visual.first_divergence(["ab", "ab"]) is None and visual.first_divergence(["ab", "abc"]) == 2


def test_compare_calls_equal_texts_identical_and_gives_every_card_three_rows():
    """Two runs of three wrote the same text: the note and their cards say "identical" (the third parts from them);
    each card is head, legend, strip, so the cards' grid can line the strips up (the browser test measures it)."""
    single, unite = load("single"), load("unite")
    twin = RunTrace.from_dict(single.to_dict() | {"method": "gac"})  # the same text under another method
    html = visual.compare_html({"single": single, "gac": twin, "unite": unite})
    names = f"single ({single.models[0]}) and gac wrote identical texts"
    assert names in html
    assert html.count('class="el-compare-same"') == 2 and "identical to gac" in html
    assert f"identical to single ({single.models[0]})" in html
    for card in re.findall(r'<div class="el-compare-card".*?(?=<div class="el-compare-card"|$)', html, re.S):
        assert re.match(r'<div class="el-compare-card" data-run="[^"]+"><div class="el-compare-head">.*?</div>'
                        r'<div class="el-legend">.*?</div><div class="el-strip">', card, re.S), card[:200]
    assert "grid-template-rows: subgrid" in visual.CSS
    assert "identical" not in visual.compare_html({"single": single, "unite": unite}).split('<div class="el-compare">')[0]
