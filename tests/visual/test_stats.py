"""A run's stats and token tables and the compare table and figure (:mod:`visual.stats`)."""

from __future__ import annotations

import csv
import io

import visual
from tests.visual.helpers import NAMES, load


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
