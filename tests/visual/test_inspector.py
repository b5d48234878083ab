"""The token inspector's explanations (:mod:`visual.inspector`) on the golden traces."""

from __future__ import annotations

import copy

import visual
from ensemble.trace import RunTrace, TokenRecord
from tests.visual.helpers import load, parse_strip, plain
from visual.style import END_MARKER


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


def test_every_fixture_token_gets_a_real_explanation(trace):
    for record in trace.tokens:
        html = visual.explain(trace, record.index)
        assert "not in the expected form" not in html
        assert html.count("<p>") >= 2  # the head and at least one sentence of why


def test_a_replaced_token_shows_its_whole_discarded_draft():
    math = load("safe_math")
    record = next(t for t in math.tokens if t.decision == "ensembled_replaced")
    rnd = math.rounds[record.round]
    draft = rnd.candidates[0]["text"]
    html = visual.explain(math, record.index).replace('<span class="ws">·</span>', " ")
    assert visual.escape.safe(draft) in html and "discarded" in html and "drafter alone" in html
    assert visual.escape.safe(draft[record.start - rnd.start:]) in html


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
    assert gemma["Sofia"] == 0.49 and fig.data[1].text[list(fig.data[1].y).index("Sofia")] == "49% · own next token"
    assert "blocked verifier" in fig.layout.title.text
    text = visual.explain(trace, 1)
    assert "Where its own token starts (character 0), <b>gemma3</b>" in text and "0.49" in text
    again = RunTrace.from_json(trace.to_json())  # the fields survive a save and a load
    assert again.tokens[1].details.verifier_from == {"gemma3": 0, "qwen": 1}


def test_a_probability_read_outside_a_server_members_top_k_is_named_in_the_inspector():
    trace = load("safe")
    record = trace.tokens[6]
    assert "top 20" not in plain(visual.explain(trace, record.index))
    record.details.outside_top_k = {"smollm2": 20}
    again = RunTrace.from_json(trace.to_json())  # the trace file keeps it
    text = plain(visual.explain(again, record.index))
    assert "smollm2's probabilities here include tokens outside smollm2's top 20" in text
    record.details.outside_top_k = {"<b>x</b>": "<i>"}  # an uploaded trace's names are escaped, a bad k is no crash
    assert "<b>x</b>" not in visual.explain(trace, record.index)
