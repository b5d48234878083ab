"""The visual layer on the golden traces: strip, inspector, figures, SpecEM views, stats, tokenizers, report."""

from __future__ import annotations

import copy
import csv
import io
import re
import subprocess
import sys
from html.parser import HTMLParser
from itertools import pairwise
from pathlib import Path

import pytest

import visual
from ensemble.trace import RunTrace, TokenRecord
from visual import charts
from visual import records as rd
from visual.escape import safe, whitespace
from visual.strip import ZERO_WIDTH_MARKER
from visual.style import END_MARKER

FIXTURES = Path(__file__).parent / "fixtures"
NAMES = ["single", "safe", "safe_math", "unite", "gac", "specem"]
ROOT = Path(__file__).parent.parent


def load(name: str) -> RunTrace:
    return RunTrace.from_json((FIXTURES / f"{name}.json").read_text(encoding="utf-8"))


@pytest.fixture(params=NAMES)
def trace(request) -> RunTrace:
    return load(request.param)


class Spans(HTMLParser):
    """The top-level ``el-tok`` spans of a strip: attributes and text (``<br>`` as a newline)."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tokens: list[dict] = []
        self.depth = 0
        self.outside = ""

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "span" and self.depth == 0:
            assert "el-tok" in attrs.get("class", "").split(), attrs
            self.tokens.append({"attrs": attrs, "text": ""})
            self.depth = 1
        elif tag == "span":
            self.depth += 1
        elif tag == "br":
            assert self.depth > 0
            self.tokens[-1]["text"] += "\n"
        else:
            assert tag == "wbr", tag

    def handle_endtag(self, tag):
        if tag == "span":
            self.depth -= 1

    def handle_data(self, data):
        if self.depth:
            self.tokens[-1]["text"] += data
        else:
            self.outside += data


def parse_strip(html: str) -> list[dict]:
    parser = Spans()
    parser.feed(html)
    parser.close()
    assert parser.depth == 0 and parser.outside == ""
    return parser.tokens


def unglyph(text: str) -> str:
    return text.replace("↵\n", "\n").replace("·", " ").replace("→", "\t").replace("␍", "\r")


def groups_of(trace: RunTrace) -> list[list[TokenRecord]]:
    return visual.token_groups(trace.tokens)


# -- escaping -------------------------------------------------------------------------------------------------
def test_safe_escapes_html_and_template_characters():
    assert safe("<a href='x' title=\"y\">&</a>") == "&lt;a href=&#x27;x&#x27; title=&quot;y&quot;&gt;&amp;&lt;/a&gt;"
    assert safe("${x} `y` {{z}}") == "&#36;&#123;x&#125; &#96;y&#96; &#123;&#123;z&#125;&#125;"
    assert safe(None) == "" and safe(3) == "3"
    assert safe("a\udce6b") == "a\ufffdb"  # a lone surrogate from an uploaded trace


def test_whitespace_markers():
    assert whitespace("a b\tc\nd") == 'a<span class="ws">·</span><wbr>b<span class="ws">→</span><wbr>c<span class="ws">↵</span><br>d'
    assert whitespace("a \n<b>", show=False) == "a <br>&lt;b&gt;"
    assert whitespace(" \n", breaks=False) == '<span class="ws">·↵</span>'
    assert "<br>" not in whitespace("x\ny", show=False, breaks=False)


# -- the strip ------------------------------------------------------------------------------------------------
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


# -- the inspector --------------------------------------------------------------------------------------------
def plain(html: str) -> str:
    """Visible text of an HTML fragment (tags dropped, entities decoded)."""

    class Text(HTMLParser):
        def __init__(self):
            super().__init__(convert_charrefs=True)
            self.out = ""

        def handle_data(self, data):
            self.out += data

    parser = Text()
    parser.feed(html)
    return parser.out


def test_sofia_blocked_token_names_both_models_and_the_split():
    trace = load("safe")
    blocked = [r for r in trace.tokens if r.decision == "oov_blocked" and r.start < 5]
    assert blocked
    for record in blocked:
        text = plain(visual.explain(trace, record.index))
        assert "gemma3 keeps Sofia as one token while smollm2 has S|of|ia" in text
        assert "prefix it never produced" in text
    # two verifiers that split " Plovdiv" alike share one sentence
    text = plain(visual.explain(trace, 6))
    assert "gemma3 and qwen cut ·Plov as ·P|lov while smollm2 has ·Pl|ov" in text


def test_blocked_inside_a_character_is_explained():
    trace = load("safe")
    record = trace.tokens[1]
    record.condition = "inside_character"
    record.details["boundary"] = None
    assert "multi-byte character" in plain(visual.explain(trace, 1))


def test_explanations_per_decision():
    safe_trace, math = load("safe"), load("safe_math")
    unanimous = next(r for r in safe_trace.tokens if r.condition == "unanimous")
    assert "unanimous" in plain(visual.explain(safe_trace, unanimous.index))
    assert "0.53 > 0.5" in plain(visual.explain(safe_trace, 0))  # the confident consensus
    kept = next(r for r in math.tokens if r.decision == "ensembled_kept")
    text = plain(visual.explain(math, kept.index))
    assert "equals the draft" in text and "GaC" in text and "Sharpening (heuristic) ran" in text
    replaced = next(r for r in math.tokens if r.decision == "ensembled_replaced")
    text = plain(visual.explain(math, replaced.index))
    assert f"fused choice {replaced.fusion.choice.replace(' ', '·')}" in text
    assert f"differs from the draft {replaced.fusion.draft.replace(' ', '·')}" in text
    gac = load("gac")
    text = plain(visual.explain(gac, 0))
    assert "qwen puts 0.82 on its top token, above the gate 0.50" in text
    assert "qwen's runners-up: Let 0.13" in text  # gated records carry the primary's top-k
    specem = load("specem")
    text = plain(visual.explain(specem, 0))
    assert "smollm2's segment" in text and "0.41" in text
    single = load("single")
    assert "qwen wrote To on its own; no other model checked it.Its probability for it: 0.82." in plain(visual.explain(single, 0))


def test_every_token_explanation_tells_lacking_from_unwanted():
    """``in_vocab`` lists the models that have the chosen key as a token; the others had to re-tokenize."""
    unite = load("unite")
    record = unite.tokens[0]
    assert record.details["in_vocab"] == ["qwen", "smollm2", "gemma3"] and record.details["support"]["gemma3"] == 0.0
    text = plain(visual.explain(unite, 0))
    assert "Every model has S as a token" in text and "no token" not in text
    assert "gemma3 gave it only 0.00 (its favourite: ·Sofia 0.41), so it follows a choice it barely wanted" in text
    record.details["in_vocab"] = ["qwen", "smollm2"]
    text = plain(visual.explain(unite, 0))
    assert "gemma3 has no token S, so it has to re-tokenize the text (gemma3 now has S)" in text
    assert "Every model has" not in text and "gave it only" not in text
    record.details.pop("splits")  # without splits the re-tokenization is not shown, still named
    record.details["support"]["qwen"] = 0.04
    text = plain(visual.explain(unite, 0))
    assert "gemma3 has no token S, so it has to re-tokenize the text: " in text
    assert "qwen has S as a token but gave it only 0.04" in text
    del record.details["in_vocab"]  # not recorded (older traces): no claim either way
    text = plain(visual.explain(unite, 0))
    assert "no token" not in text and "as a token" not in text and "Probability each model gave it" in text


def _ending(trace: RunTrace, like: TokenRecord, **changes) -> TokenRecord:
    """Append an end-of-sequence record to ``trace``, copied from ``like`` (its details, fusion, top-k)."""
    record = copy.deepcopy(like)
    record.index, record.text, record.start, record.end = len(trace.tokens), "<eos>", len(trace.text), len(trace.text)
    for name, value in changes.items():
        setattr(record, name, value)
    trace.tokens.append(record)
    return record


def test_end_of_sequence_is_an_end_marker_and_explained():
    for name, decision in (("safe", "consensus"), ("unite", "fused")):
        trace = load(name)
        end = trace.tokens[-1]
        assert (end.text, end.start, end.end, end.decision) == ("<eos>", len(trace.text), len(trace.text), decision)
        assert trace.stats.stop_reason == "eos" and trace.stats.generated_tokens == len(trace.tokens)
        span = parse_strip(visual.strip_html(trace))[-1]
        assert {"zw", "eos", decision} <= set(span["attrs"]["class"].split()) and span["text"] == END_MARKER
        assert "end of the answer" in span["attrs"]["title"]
        assert END_MARKER in plain(visual.explain(trace, end.index))
        assert "answer ends at the decision point" in plain(visual.tokenization_html(trace, end.index))
    for name in ("single", "gac", "specem", "safe_math"):  # stopped by the budget: no end record
        assert load(name).tokens[-1].text != "<eos>"

    safe_trace = load("safe")
    text = plain(visual.explain(safe_trace, 15))
    assert "The drafter smollm2 proposed to stop here (probability 0.88); not every verifier agreed (gemma3 preferred ↵ 0.32)" in text
    assert "mean probability 0.62 > 0.5, so SAFE accepted the end of the answer without ensembling (confident)" in text
    safe_trace.settings["drafter_weight"] = 2.0  # the mean said as it was weighed, the drafter counting twice
    text = plain(visual.explain(safe_trace, 15))
    assert "weighted mean probability 0.62 (smollm2 counts 2, gemma3 counts 1 and qwen counts 1) > 0.5, so SAFE accepted" in text
    safe_trace.settings["weights"] = {"smollm2": 1.0}  # weights naming the drafter win over drafter_weight
    assert "but the models are confident on average: mean probability 0.62 > 0.5" in plain(visual.explain(safe_trace, 15))
    safe_trace.tokens[15].condition = "unanimous"
    assert "proposed to stop here (probability 0.88); all verifiers agreed (gemma3 0.01 and qwen 0.96)" in plain(visual.explain(safe_trace, 15))
    text = plain(visual.explain(load("unite"), 15))
    assert "the vote was to stop, so the answer ended here" in text and "its top choice was to stop (<eos>, fused probability 0.63)" in text
    assert "gemma3 gave ending only <0.01 (its favourite: ↵ 0.28)" in text

    math = load("safe_math")
    kept = next(r for r in math.tokens if r.decision == "ensembled_kept")
    record = _ending(math, kept)
    record.fusion.choice = record.fusion.draft = "<eos>"
    text = plain(visual.explain(math, record.index))
    assert "The drafter qwen proposed to stop here; the models disagreed, so they voted" in text and "is to stop as well" in text
    replaced = next(r for r in math.tokens if r.decision == "ensembled_replaced")
    record = _ending(math, replaced)
    record.fusion.choice = "<eos>"
    assert "was to stop instead of the draft ·follow, so the answer ended here" in plain(visual.explain(math, record.index))
    blocked = next(r for r in math.tokens if r.decision == "oov_blocked")
    record = _ending(math, blocked)
    record.details["boundary"] = len(math.text)
    text = plain(visual.explain(math, record.index))
    assert text.count("The drafter qwen proposed to stop here") == 1
    assert "gemma3 cuts the text differently, so the models could not vote and the answer ended as proposed" in text

    single = load("single")
    _ending(single, single.tokens[-1], topk=[["<eos>", 0.9], [" more", 0.06]])
    assert "qwen chose to end the answer here.Its probability of ending: 0.90. Had it gone on, its next choices were: ·more 0.06." in plain(visual.explain(single, 40))
    gac = load("gac")
    _ending(gac, gac.tokens[0], topk=[["<eos>", 0.7], [" And", 0.2]])
    assert "puts 0.82 on its top choice, to stop here, above the gate 0.50, so the answer ended without fusing" in plain(visual.explain(gac, 32))
    specem = load("specem")
    _ending(specem, specem.tokens[-1])
    assert "smollm2's winning segment ended with the end-of-sequence token" in plain(visual.explain(specem, 48))
    for trace, index in ((single, 40), (gac, 32), (specem, 48), (math, len(math.tokens) - 1)):
        assert parse_strip(visual.strip_html(trace))[-1]["text"] == END_MARKER
        assert visual.tokenization_html(trace, index)


def test_explain_and_json_of_a_missing_index():
    trace = load("single")
    for bad in (-1, len(trace.tokens), "x", None):
        assert "Click a token" in visual.explain(trace, bad)
        assert visual.inspector_json(trace, bad) == {}
        assert visual.topk_figure(trace, bad) is None
    assert visual.explain(trace, "3") == visual.explain(trace, 3)
    record = visual.inspector_json(trace, 3)
    assert record["index"] == 3 and record["text"] == trace.tokens[3].text and record["topk"] == trace.tokens[3].topk


class Grid(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.items: list[dict] = []
        self.current = None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        cls = attrs.get("class", "").split()
        if tag == "span" and cls and cls[0] in ("el-box", "el-edge", "el-axis", "el-grid-label"):
            self.current = {"cls": cls, "style": attrs.get("style", ""), "title": attrs.get("title", ""), "text": ""}
            self.items.append(self.current)

    def handle_data(self, data):
        if self.current is not None:
            self.current["text"] += data

    def handle_endtag(self, tag):
        pass


def grid_items(html: str) -> list[dict]:
    parser = Grid()
    parser.feed(html)
    return parser.items


def columns(item: dict) -> tuple[int, int]:
    a, b = re.search(r"grid-column: (\d+) / (\d+)", item["style"]).groups()
    return int(a), int(b)


def grid_rows(html: str) -> dict[str, list[dict]]:
    """Row label -> that row's boxes (by the ``grid-row`` they are placed on)."""
    items = grid_items(html)
    label_of = {re.search(r"grid-row: (\d+)", i["style"]).group(1): i["text"] for i in items if i["cls"][0] == "el-grid-label"}
    rows: dict[str, list[dict]] = {name: [] for name in label_of.values()}
    for item in items:
        if item["cls"][0] == "el-box":
            rows[label_of[re.search(r"grid-row: (\d+)", item["style"]).group(1)]].append(item)
    return rows


def test_tokenization_of_the_sofia_block():
    trace = load("safe")
    items = grid_items(visual.tokenization_html(trace, 1))
    labels = [i["text"] for i in items if i["cls"][0] == "el-grid-label"]
    assert labels == ["text", "response", "smollm2 (drafter)", "gemma3 (blocked)", "qwen (verifier)"]
    sofia = next(i for i in items if i["cls"][0] == "el-box" and i["text"] == "Sofia")
    a, b = columns(sofia)
    assert b - a == 3  # Gemma's one token spans SmolLM2's (and Qwen's) three
    kinds = [i["cls"][1] for i in items if i["cls"][0] == "el-edge"]
    assert kinds.count("decision") == 1 and "missing" in kinds and "shared" in kinds
    current = [i for i in items if "el-current" in i["cls"]]
    assert [i["text"] for i in current] == ["of"] and "oov_blocked" in current[0]["cls"]  # the clicked token, in the response row


def test_tokenization_shows_every_models_cut(trace):
    """Every record with ``splits`` gets one row per model, each covering the whole window (cut at shared edges)."""
    for record in trace.tokens:
        html = visual.tokenization_html(trace, record.index)
        items = grid_items(html)
        assert [i for i in items if i["cls"][0] == "el-box" and "unknown" not in i["cls"]], record
        assert sum(1 for i in items if "decision" in i["cls"]) <= 1
        splits = record.details.get("splits")
        if not splits:
            continue
        rows = grid_rows(html)
        labels = list(rows)
        assert labels[:2] == ["text", "response"] and [name.split(" (")[0] for name in labels[2:]] == sorted(
            splits, key=lambda m: m != labels[2].split(" (")[0]
        )
        axis = "".join(i["text"] for i in items if i["cls"][0] == "el-axis")
        for name in labels[2:]:
            boxes = rows[name]
            assert boxes and not [b for b in boxes if "unknown" in b["cls"]], (record.index, name)
            assert "".join(b["text"] for b in boxes) == axis  # the row tiles the window exactly
        if trace.method == "safe":
            assert labels[2] == f"{record.model if record.model in trace.models else trace.models[0]} (drafter)"
            roles = {name.split(" (")[0]: name.split(" (")[1][:-1] for name in labels[2:]}
            blocked = record.details.get("blocked_by", [])
            assert all(role == ("blocked" if m in blocked else "verifier") for m, role in list(roles.items())[1:])
    if trace.method == "gac":
        assert "qwen (primary)" in grid_rows(visual.tokenization_html(trace, 0))


def test_tokenization_of_a_consensus_token():
    trace = load("safe")
    rows = grid_rows(visual.tokenization_html(trace, 5))  # " Pl": gemma3 and qwen's own next token is " P"
    assert list(rows) == ["text", "response", "smollm2 (drafter)", "gemma3 (verifier)", "qwen (verifier)"]
    assert [b["text"] for b in rows["gemma3 (verifier)"]] == ["·went", "·to", "·P", "lov", "div", "·in", "·"]
    assert [b["text"] for b in rows["smollm2 (drafter)"]][2:4] == ["·Pl", "ov"]
    assert "gemma3: ' P' [13, 15)" in [b["title"] for b in rows["gemma3 (verifier)"]]
    # traces without splits (uploaded old ones): the response and each verifier's own next token, nothing guessed
    del trace.tokens[5].details["splits"]
    html = visual.tokenization_html(trace, 5)
    rows = grid_rows(html)
    assert list(rows) == ["text", "response", "gemma3 (next)", "qwen (next)"]
    assert [b["text"] for b in rows["gemma3 (next)"] if "unknown" not in b["cls"]] == ["·P"]
    assert "rest of its tokens is not recorded" in plain(html)


def test_tokenization_of_a_replaced_token_shows_the_checked_draft():
    math = load("safe_math")
    record = next(r for r in math.tokens if r.decision == "ensembled_replaced" and r.text == " calculate")
    html = visual.tokenization_html(math, record.index)
    rows = grid_rows(html)
    axis = "".join(i["text"] for i in grid_items(html) if i["cls"][0] == "el-axis")
    assert axis.endswith("·follow·these") and [b["text"] for b in rows["qwen (drafter)"]][-2:] == ["·follow", "·these"]
    gap = rows["response"][-1]
    assert "unknown" in gap["cls"] and "replaced" in gap["title"]
    assert "the fused choice ·calculate replaced it" in plain(html)


def test_tokenization_of_an_unfinished_character():
    """A draft that stops inside a character: the last piece ends with U+FFFD and is one longer than its span."""
    assert rd.spans([["a\ufffd", 0, 1], ["bb", 1, 2], ["\ufffd", 2, 2]]) == [("a\ufffd", 0, 1), ("\ufffd", 2, 2)]
    trace = load("safe")
    record = trace.tokens[3]
    for tokens in record.details["splits"].values():
        tokens.append([" \ufffd", 13, 14])  # " " and the first byte of a character after " to"
    rows = grid_rows(visual.tokenization_html(trace, 3))
    last = rows["gemma3 (verifier)"][-1]
    assert last["text"] == "·" and "incomplete" in last["cls"] and "ends inside a character" in last["title"]


# -- figures --------------------------------------------------------------------------------------------------
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


# -- SpecEM ---------------------------------------------------------------------------------------------------
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


# -- stats ----------------------------------------------------------------------------------------------------
def test_stats_frame_equals_trace_stats(trace):
    frame = visual.stats_frame(trace)
    assert list(frame.columns) == ["metric", "value"]
    values = dict(zip(frame["metric"], frame["value"], strict=True))
    s = trace.stats
    assert values["tokens"] == s.generated_tokens
    assert values["E/T"] == s.et_ratio
    assert values["latency (s)"] == s.latency_s
    assert values["tokens/s"] == s.tokens_per_s
    assert values["first token (s)"] == s.first_token_s
    assert values["rounds"] == s.rounds
    assert values["stop reason"] == s.stop_reason
    assert values["draft tokens"] == s.draft_tokens and values["draft discarded"] == s.draft_discarded
    assert values["mean fusion (ms)"] == s.fusion_ms_mean
    assert {k.split(": ")[1]: v for k, v in values.items() if k.startswith("decisions: ")} == s.decisions
    assert {k.split(": ")[1]: v for k, v in values.items() if k.startswith("forward passes: ")} == s.forward_passes
    assert {k.split(": ")[1]: v for k, v in values.items() if k.startswith("wins: ")} == s.wins
    html = visual.stats_html(trace)
    for decision, count in s.decisions.items():
        assert f'class="el-chip {decision}"' in html and f": {count}</span>" in html
    tokens = visual.token_frame(trace)
    shown = [r.text.replace(" ", "·").replace("\n", "↵").replace("\t", "→").replace("\r", "␍") for r in trace.tokens]
    assert len(tokens) == len(trace.tokens) and list(tokens["text"]) == shown  # leading spaces stay visible
    assert any(t.startswith("·") for t in shown)
    assert [r["text"] for r in csv.DictReader(io.StringIO(visual.tokens_csv(trace)))] == [r.text for r in trace.tokens]
    for decision, count in s.decisions.items():  # the decision filter
        only = visual.token_frame(trace, decision)
        assert len(only) == count and set(only["decision"]) == {decision}
    assert len(visual.token_frame(trace, "all")) == len(trace.tokens)
    assert {d for _, d in visual.token_filter_choices()} >= {"all", *s.decisions}


def test_forward_time_shows_when_recorded():
    old = load("safe")  # written before forward time was recorded
    assert old.stats.forward_s == {}
    assert "forward time" not in visual.stats_html(old)
    assert not any(m.startswith("forward time") for m in visual.stats_frame(old)["metric"])
    new = load("safe")
    new.stats.forward_s = {"qwen": 3.25, "smollm2": 0.5, "<b>x</b>": 1.0}
    values = dict(zip(*visual.stats_frame(new).T.values, strict=True))
    assert {k.split(": ")[1]: v for k, v in values.items() if k.startswith("forward time (s): ")} == new.stats.forward_s
    html = visual.stats_html(new)
    assert ">forward time</th>" in html and ">3.25 s</td>" in html and ">0.50 s</td>" in html
    assert "<b>x</b>" not in html and "&lt;b&gt;x&lt;/b&gt;" in html


def test_compare_frame_and_figure():
    traces = {name: load(name) for name in NAMES}
    frame = visual.compare_frame(traces)
    assert list(frame.columns) == ["measure", *NAMES]  # a run per column: two to four runs fit a phone
    row = {m: frame.iloc[i] for i, m in enumerate(frame["measure"])}
    assert [row["tokens"][n] for n in NAMES] == [t.stats.generated_tokens for t in traces.values()]
    # E/T as a percentage with one decimal (SpecEM: its votes), human labels, latency to a tenth of a second
    et = row["E/T (ensemble steps per token)"]
    assert et["safe"] == f"{100 * traces['safe'].stats.et_ratio:.1f}%" and et["specem"].startswith("votes on every segment")
    assert [row["method"][n] for n in NAMES] == [t.method for t in traces.values()]
    assert row["tokens: blocked: tokenizer mismatch"]["safe"] == traces["safe"].stats.decisions["oov_blocked"]
    assert row["tokens: blocked: tokenizer mismatch"]["single"] == 0
    assert row["latency"]["safe"] == f"{traces['safe'].stats.latency_s:.1f} s"
    assert not any("_" in m for m in frame["measure"])  # no raw keys such as ensembled_kept
    fig = visual.compare_figure(traces)
    assert len(fig.data) == 2 and all(len(bars.x) == len(NAMES) for bars in fig.data)
    assert list(fig.data[0].y) == [t.stats.latency_s for t in traces.values()]
    assert visual.compare_figure({}) is None


# -- tokenizers tab -------------------------------------------------------------------------------------------
def comparison() -> dict:
    """``ensemble.tokens.align.compare`` output for 'Sofia 🙂 東京' (qwen, smollm2, gemma3), written out by hand."""

    def toks(rows):
        return [{"id": i, "text": t, "start": s, "end": e, "bytes": b} for i, (t, s, e, b) in enumerate(rows)]

    models = {
        "qwen": toks([("S", 0, 1, False), ("of", 1, 3, False), ("ia", 3, 5, False), (" 🙂", 5, 7, False), (" ", 7, 8, False), ("東", 8, 9, False), ("京", 9, 10, False)]),
        "smollm2": toks([("S", 0, 1, False), ("of", 1, 3, False), ("ia", 3, 5, False), (" 🙂", 5, 7, False), (" ", 7, 8, False), ("<0x9D>", 8, 9, True), ("<0xB1>", 8, 9, True), ("<0xE4><0xBA>", 9, 10, True), ("<0xAC>", 9, 10, True)]),
        "gemma3": toks([("Sofia", 0, 5, False), (" 🙂", 5, 7, False), (" 東京", 7, 10, False)]),
    }
    bounds = {name: sorted({t["start"] for t in tokens} | {10}) for name, tokens in models.items()}
    union = sorted(set().union(*bounds.values()))
    shared = sorted(set.intersection(*(set(b) for b in bounds.values())))
    return {
        "text": "Sofia 🙂 東京",
        "models": {
            name: {"tokens": tokens, "count": len(tokens), "boundaries": bounds[name], "missing": sorted(set(union) - set(bounds[name]))}
            for name, tokens in models.items()
        },
        "shared_boundaries": shared,
        "all_boundaries": union,
        "segments": [{"start": a, "end": b, "text": "Sofia 🙂 東京"[a:b]} for a, b in pairwise(union)],
        "agreement": round(100 * (len(shared) - 2) / (len(union) - 2), 2),
        "notes": [],
    }


def test_tokenizers_html_aligns_models_and_marks_missing_boundaries():
    data = comparison()
    html = visual.tokenizers_html(data)
    assert data["agreement"] == 33.33 and "33.3%" in html
    for name, info in data["models"].items():
        assert f"<b>{name}</b> {info['count']} tokens" in html
    items = grid_items(html)
    labels = [i["text"] for i in items if i["cls"][0] == "el-grid-label"]
    assert labels == ["text", "qwen", "smollm2", "gemma3"]
    boxes = [i for i in items if i["cls"][0] == "el-box"]
    # smollm2's four byte tokens are two boxes (東, 京), each drawn once, bytes in the tooltip
    bytes_boxes = [b for b in boxes if "bytes" in b["cls"]]
    assert [b["text"] for b in bytes_boxes] == ["東", "京"]
    assert "<0x9D> <0xB1>" in bytes_boxes[0]["title"]
    sofia = next(b for b in boxes if b["text"] == "Sofia")
    assert columns(sofia)[1] - columns(sofia)[0] == 3
    edges = [i["cls"][1] for i in items if i["cls"][0] == "el-edge"]
    missing = len(set(data["all_boundaries"]) - set(data["shared_boundaries"]))
    assert edges.count("missing") == missing == 4
    assert edges.count("shared") == len(data["shared_boundaries"]) - 2  # interior ones
    axis = "".join(i["text"] for i in items if i["cls"][0] == "el-axis")
    assert axis == data["text"].replace(" ", "·")
    plain_axis = "".join(i["text"] for i in grid_items(visual.tokenizers_html(data, show_whitespace=False)) if i["cls"][0] == "el-axis")
    assert plain_axis == data["text"]
    frame = visual.tokenizer_counts_frame(data)
    assert list(frame["tokens"]) == [7, 9, 3] and list(frame["missing boundaries"]) == [0, 0, 4]
    assert "S|of|ia" in visual.MISMATCH_EXPLAINER and "Sofia" in visual.MISMATCH_EXPLAINER


def test_tokenizers_html_on_bad_input():
    assert "choose at least one" in visual.tokenizers_html({})
    assert "choose at least one" in visual.tokenizers_html({"text": "x", "models": {}})


# -- evaluation report ----------------------------------------------------------------------------------------
ROWS = [
    {"method": "single", "n": 50, "correct": 20, "accuracy": 0.4, "ci_low": 0.27, "ci_high": 0.54, "mean_et": 0.0,
     "tokens_per_s": 9.5, "s_per_question": 12.0, "corruption_rate": 0.0, "mean_tokens": 150.0},
    {"method": "safe", "n": 50, "correct": 24, "accuracy": 0.48, "ci_low": 0.35, "ci_high": 0.62, "mean_et": 0.12,
     "tokens_per_s": 4.1, "s_per_question": 30.5, "corruption_rate": 0.02, "mean_tokens": 140.0},
    {"method": "unite", "n": 50, "correct": 18, "accuracy": 0.36, "ci_low": 0.24, "ci_high": 0.5, "mean_et": 1.0,
     "tokens_per_s": 2.0, "s_per_question": 60.0, "corruption_rate": None, "mean_tokens": 160.0},
]


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


# -- hostile input --------------------------------------------------------------------------------------------
PAYLOADS = ["<script>alert(1)</script>", "<img src=x onerror=alert(1)>", "${alert(1)}", "{{7*7}}", "`x`"]
KEEP = {"decision", "method", "created", "condition", "sharpen", "fusion", "stop_reason", "model"}  # model: SAFE's "ensemble"


def hostile(trace: RunTrace) -> RunTrace:
    """The trace with payloads in its text, token texts, model names, keys, candidates and messages."""
    data = copy.deepcopy(trace.to_dict())
    names = {m: m + PAYLOADS[i % len(PAYLOADS)] for i, m in enumerate(trace.models)}
    count = iter(range(10**9))

    def payload() -> str:
        return PAYLOADS[next(count) % len(PAYLOADS)]

    inserted = []  # (old offset, payload) inserted before the token starting there
    new_text, last = "", 0
    for tok in data["tokens"]:
        new_text += data["text"][last : tok["start"]]
        if tok["start"] < tok["end"] and tok["start"] >= last:
            p = payload()
            inserted.append((tok["start"], p))
            new_text += p
        new_text += data["text"][max(tok["start"], last) : tok["end"]]
        last = max(last, tok["end"])
    new_text += data["text"][last:]

    def shift(offset: int) -> int:
        """New offset of an old one: a payload belongs to the token that starts where it was inserted."""
        return offset + sum(len(p) for at, p in inserted if at < offset)

    def walk(value, key=None):
        if isinstance(value, dict):
            return {names.get(k, k): walk(v, k) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v, key) for v in value]
        if isinstance(value, str):
            return names.get(value, value if key in KEEP else value + payload())
        return value

    def splits(rows):
        out = []
        for _, s, e in rows:
            a, b = shift(s), shift(e)
            out.append([new_text[a:b] if b <= len(new_text) else "x" * (b - a), a, b])
        return out

    tokens = data.pop("tokens")
    data = walk(data)
    data["text"] = new_text
    for tok in tokens:
        details = tok.get("details") or {}
        raw_splits = details.pop("splits", None)
        boundary = details.pop("boundary", None)
        tok.update(walk({k: v for k, v in tok.items() if k not in ("text", "start", "end", "index")}))
        tok["start"], tok["end"] = shift(tok["start"]), shift(tok["end"])
        tok["text"] = new_text[tok["start"] : tok["end"]]
        if raw_splits is not None:
            tok["details"]["splits"] = {names.get(m, m): splits(rows) for m, rows in raw_splits.items()}
        if boundary is not None:
            tok["details"]["boundary"] = shift(boundary)
    data["tokens"] = tokens
    data["warnings"] = [*PAYLOADS]
    data["error"] = PAYLOADS[0]
    return RunTrace.from_dict(data)


class Tags(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.bad: list = []

    def handle_starttag(self, tag, attrs):
        if tag in ("script", "img", "iframe", "object", "embed", "style"):
            self.bad.append(tag)
        for name, value in attrs:
            if name.startswith("on") or (value or "").strip().lower().startswith("javascript:"):
                self.bad.append((tag, name, value))


def assert_harmless(html: str) -> None:
    assert "<script" not in html.lower() and "<img" not in html.lower()
    assert "${" not in html and "{{" not in html and "`" not in html
    parser = Tags()
    parser.feed(html)
    assert parser.bad == []


def figure_strings(fig) -> list[str]:
    out = []

    def walk(value):
        if isinstance(value, str):
            out.append(value)
        elif isinstance(value, dict):
            for v in value.values():
                walk(v)
        elif isinstance(value, list | tuple):
            for v in value:
                walk(v)
        elif hasattr(value, "tolist"):
            walk(value.tolist())

    walk(fig.to_plotly_json())
    return out


@pytest.mark.parametrize("name", NAMES)
def test_hostile_trace_renders_harmless(name):
    trace = hostile(load(name))
    assert any(p in trace.text for p in PAYLOADS) and any(p in trace.models[0] for p in PAYLOADS)
    assert "".join(trace.text[r.start : r.end] for r in trace.tokens) == trace.text
    outputs = [
        visual.strip_html(trace),
        visual.strip_html(trace, show_whitespace=False),
        visual.legend_html(trace.method, trace.models),
        visual.rounds_html(trace),
        visual.stats_html(trace),
        visual.results_html([{**ROWS[0], "method": p} for p in PAYLOADS]),
    ]
    builder = visual.StripBuilder(trace.method, trace.models)
    outputs.append("".join(builder.add([r], trace.text) for r in trace.tokens))
    figures = [visual.weights_figure(trace), visual.compare_figure({p: trace for p in PAYLOADS})]
    figures += [visual.score_heatmap(trace, k) for k in range(len(trace.rounds))]
    for record in trace.tokens:
        outputs += [visual.explain(trace, record.index), visual.tokenization_html(trace, record.index)]
    with_data = [r for r in trace.tokens if r.fusion is not None or r.topk][:6]  # figures are slow to build
    for record in with_data:
        figures += [visual.topk_figure(trace, record.index), visual.fusion_figure(trace, record.index)]
    for html in outputs:
        assert_harmless(html)
    assert any("&lt;script&gt;" in html for html in outputs)  # the payload is shown, as text
    for fig in figures:
        if fig is not None:
            for text in figure_strings(fig):
                assert_harmless(text)
    if name == "safe":  # the blocked-token explanation still works with hostile text and names
        assert "keeps" in plain(visual.explain(trace, 1)) and "&lt;script&gt;" in visual.explain(trace, 1)


def test_hostile_tokenizer_comparison_and_report(tmp_path):
    data = comparison()
    data["text"] = data["text"][:5] + "`{{x}}`" + data["text"][5:]
    for info in data["models"].values():
        for tok in info["tokens"]:
            tok["text"] = tok["text"] + PAYLOADS[1]
    data["models"] = {name + PAYLOADS[i]: info for i, (name, info) in enumerate(data["models"].items())}
    data["notes"] = [PAYLOADS[2]]
    assert_harmless(visual.tokenizers_html(data))
    path = tmp_path / "r.html"
    visual.write_report([{**ROWS[0], "method": p} for p in PAYLOADS], path, PAYLOADS[0], {PAYLOADS[1]: PAYLOADS[2]})
    html = path.read_text(encoding="utf-8")
    without_plotly = re.sub(r"<script\b[^>]*>.*?</script>", "", html, flags=re.S)
    assert_harmless(re.sub(r"<style>.*?</style>", "", without_plotly, flags=re.S))
    assert "alert(1)</script>" not in html  # plotly's JSON escapes '<' too


def test_visual_imports_no_model_code():
    for path in (ROOT / "visual").glob("*.py"):
        for line in path.read_text(encoding="utf-8").splitlines():
            if re.match(r"\s*(from|import)\s+(ensemble|torch|transformers|gradio)\b", line):
                # the trace, key tables, readable text and the methods' declared capabilities: all torch-free
                assert re.match(r"\s*from ensemble\.(trace|trace\.readable|tokens\.key_table|capabilities) import ", line), f"{path.name}: {line}"
    code = "import sys, visual; bad = [m for m in ('torch', 'transformers', 'gradio') if m in sys.modules]; assert not bad, bad"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": ""})


def test_malformed_uploaded_details_never_crash():
    """``details`` is free-form JSON in an uploaded trace: odd shapes give a plain answer, not an exception."""
    junk = [
        {"splits": "x", "blocked_by": 5, "boundary": "7"},
        {"splits": {"a": [["toolong", 0, 1], [1, 2, 3], "z"]}, "blocked_by": ["a", 3], "boundary": 10**12},
        {"probs": [1, 2], "verifier_tokens": None, "mean_prob": "high", "support": "s", "in_vocab": "qwen"},
        {"primary_top": None, "gate": [0.5], "segment_of": {"x": 1}, "control_token": "yes", "completed": 4},
        {"per_model_top": {"q": [["a", "b"]], "r": 7}, "splits": {"q": [["ab\ufffd", 0, 1], ["x", 5, 3]], "r": "y"},
         "in_vocab": [1, None], "completed_by": 3, "verifier_tokens": {"q": 5}, "boundary": -4},
    ]
    for name in NAMES:
        trace = load(name)
        for k, record in enumerate(trace.tokens[:8]):
            record.details = junk[k % len(junk)]
            record.condition = ["inside_character", None, 3, "unanimous"][k % 4]
            record.round = ["x", None, 10**6, -1][k % 4]
            record.topk = ["x", None, [["a", "b"]], [[1, 2], ["k", 0.5]]][k % 4]
        html = visual.strip_html(trace)
        assert len(parse_strip(html)) == len(groups_of(trace))
        for record in trace.tokens[:8]:
            assert visual.explain(trace, record.index).startswith('<div class="el-explain">')
            visual.tokenization_html(trace, record.index)
            visual.topk_figure(trace, record.index)
            visual.fusion_figure(trace, record.index)


def test_every_fixture_token_gets_a_real_explanation(trace):
    for record in trace.tokens:
        html = visual.explain(trace, record.index)
        assert "not in the expected form" not in html
        assert html.count("<p>") >= 2  # the head and at least one sentence of why


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


def test_model_rows_and_chart_marks_do_not_wear_decision_colours():
    from visual import charts
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


def test_specem_rounds_fold_and_explain_reward_and_weight():
    trace = RunTrace.from_json((FIXTURES / "specem.json").read_text(encoding="utf-8"))
    html = visual.rounds_html(trace)
    assert html.count('<details class="el-round"') == len(trace.rounds) >= 2
    assert html.count('<details class="el-round" open>') == 1 and html.rfind(" open>") > html.rfind('<details class="el-round">')
    assert "share of (other model&#x27;s verifier" in html or "share of (other model's verifier" in html
    assert "exp(η·reward)" in html
    fig = visual.weights_figure(trace)
    assert fig.layout.yaxis.range[0] == 0 and fig.layout.yaxis.range[1] <= 1.0


def test_standalone_pages_keep_model_output_inert():
    """The exported page's only scripts are its own two: text that tries to close them stays data."""
    import json as _json

    trace = RunTrace.from_json((FIXTURES / "safe.json").read_text(encoding="utf-8"))
    evil = "</script><script>alert(1)</script><img src=x onerror=alert(2)>"
    trace.prompt = evil
    trace.tokens[0].details.blocked_by = [evil] if hasattr(trace.tokens[0].details, "blocked_by") else None
    for page in (visual.run_document(trace), visual.compare_document({"safe": trace}),
                 visual.tokenizers_document({"text": evil, "models": {}})):
        assert page.startswith("<!DOCTYPE html>") and "<script src" not in page and "<link" not in page
        assert page.count("<script") <= 2 and "<img" not in page and "alert(1)</script>" not in page
    page = visual.run_document(trace)
    data = _json.loads(re.search(r'<script type="application/json" id="el-data">(.*?)</script>', page, re.S).group(1))
    assert set(data) == {str(t.index) for t in trace.tokens} and all("<script" not in v for v in data.values())


def test_compare_cards_name_a_single_model_and_mark_where_the_runs_part():
    single, unite = load("single"), load("unite")
    html = visual.compare_html({"single": single, "unite": unite})
    assert f"<h4>single ({single.models[0]})</h4>" in html and 'data-run="unite"' in html
    at = visual.first_divergence([single.text, unite.text])
    assert at is not None and single.text[:at] == unite.text[:at] and single.text[at:at + 1] != unite.text[at:at + 1]
    assert html.count('class="el-fork-split"') == 2 and f"agree on their first {at} character" in html
    same = visual.compare_html({"a": single, "b": single})
    assert "el-fork-split" not in same and "Every run wrote the same text" in same
    assert visual.first_divergence(["ab", "ab"]) is None and visual.first_divergence(["ab", "abc"]) == 2


def test_a_replaced_token_shows_its_whole_discarded_draft():
    math = load("safe_math")
    record = next(t for t in math.tokens if t.decision == "ensembled_replaced")
    rnd = math.rounds[record.round]
    draft = rnd.candidates[0]["text"]
    html = visual.explain(math, record.index).replace('<span class="ws">·</span>', " ")
    assert visual.escape.safe(draft) in html and "discarded" in html and "drafter alone" in html
    assert visual.escape.safe(draft[record.start - rnd.start:]) in html


def test_the_aligned_view_packs_blocks_that_fit_a_phone_and_keeps_the_texts_line_breaks():
    from visual.aligned import BLOCK_CHARS, GUTTER_CHARS

    words = "Janet's ducks lay 16 eggs per day. She eats three for breakfast every morning\nand bakes muffins."
    tokens, pos = [], 0
    for piece in re.findall(r" ?\S+|\n", words):
        tokens.append({"id": len(tokens), "text": piece, "start": pos, "end": pos + len(piece)})
        pos += len(piece)
    assert pos == len(words)
    data = {"text": words, "models": {"a": {"tokens": tokens, "count": len(tokens), "missing": []}},
            "shared_boundaries": [0, len(words)], "all_boundaries": [0, len(words)], "agreement": 100.0}
    html = visual.tokenizers_html(data, show_whitespace=False)
    blocks = html.split('<div class="el-grid-block">')[1:]
    texts = ["".join(i["text"] for i in grid_items(b) if i["cls"][0] == "el-axis").replace("↵", "\n") for b in blocks]
    assert "".join(texts) == words  # every character once, in order (a newline is drawn as ↵)
    def width(t: str) -> float:  # characters plus a gutter per token (one segment per word here)
        return len(t) + GUTTER_CHARS * len(re.findall(r" ?\S+|\n", t))

    assert all(width(t) <= BLOCK_CHARS for t in texts) and len(texts) >= 3
    # each block is filled as far as the next word allows, so blocks are not needlessly short
    for t, nxt in pairwise(texts):
        assert t.endswith("\n") or width(t + re.match(r" ?\S+|\n", nxt).group()) > BLOCK_CHARS
    assert html.count('class="el-grid-break"') == 1
    assert next(t for t in texts if t.endswith("\n")).endswith("morning\n")


def test_a_blocked_token_shows_what_each_verifier_wanted_where_its_own_token_starts():
    """SAFE keeps, from the verification pass, a blocked verifier's row where its own token starts: the inspector
    draws every model's top-k for a blocked token, not only the drafter's, and says what the verifier wanted."""
    trace = load("safe")
    record = trace.tokens[1]  # "of" inside "Sofia": gemma3 has no edge at 1
    assert record.decision == "oov_blocked"
    before = visual.topk_figure(trace, 1)
    assert [bars.name for bars in before.data] == ["smollm2"]  # a trace written before: the drafter only
    record.details.per_model_top = {"smollm2": record.topk, "gemma3": [["Sofia", 0.49], [" S", 0.2]], "qwen": [["of", 0.97]]}
    record.details.verifier_from = {"gemma3": 0, "qwen": 1}
    record.details.verifier_tokens = {"gemma3": "Sofia", "qwen": "of"}
    fig = visual.topk_figure(trace, 1)
    assert [bars.name for bars in fig.data] == ["smollm2", "gemma3", "qwen"]
    gemma = dict(zip(fig.data[1].y, fig.data[1].x, strict=True))
    assert gemma["Sofia"] == 0.49 and fig.data[1].text[list(fig.data[1].y).index("Sofia")] == "own next token"
    assert "blocked verifier" in fig.layout.title.text
    text = visual.explain(trace, 1)
    assert "Where its own token starts (character 0), <b>gemma3</b>" in text and "0.49" in text
    again = RunTrace.from_json(trace.to_json())  # the fields survive a save and a load
    assert again.tokens[1].details.verifier_from == {"gemma3": 0, "qwen": 1}
