"""How each model cut the text around a token (:mod:`visual.splits`)."""

from __future__ import annotations

import re

import visual
from tests.visual.helpers import columns, grid_items, grid_rows, load, plain
from visual import records as rd


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


def test_a_replaced_token_is_drawn_in_its_drafts_place_and_the_draft_is_struck():
    """Issue 39, item 2: the token that replaced a draft ("." for " and", ":" for ":\\n") is in the response row, over
    the columns of the draft token it replaced (the row was empty there); the draft the models checked is struck
    through in the text row; and no later response token is drawn under the draft (a stray "·" under "·to")."""
    math = load("safe_math")
    replaced = [r for r in math.tokens if r.decision == "ensembled_replaced" and r.details.get("splits")]
    assert len(replaced) >= 5
    for record in replaced:
        html = visual.tokenization_html(math, record.index)
        items = grid_items(html)
        rows = grid_rows(html)
        current = [b for b in rows["response"] if "el-current" in b["cls"]]
        assert [b["text"] for b in current] == [record.text.replace(" ", "·").replace("\n", "↵")], record.index
        assert "ensembled_replaced" in current[0]["cls"] and repr(record.fusion.draft) in current[0]["title"]
        start, _ = columns(current[0])
        later = [b for b in rows["response"] if "unknown" not in b["cls"] and columns(b)[0] > start]
        assert not later, (record.index, later)  # nothing of the response after the replacement sits under the draft
        axis = [i for i in items if i["cls"][0] == "el-axis"]
        struck = [i for i in axis if "struck" in i["cls"]]
        assert struck and all(int(re.search(r"grid-column: (\d+)", i["style"]).group(1)) >= start for i in struck)
        assert "".join(i["text"] for i in axis).endswith("".join(i["text"] for i in struck))  # the whole checked draft
        assert "discarded" in struck[0]["title"]
    html = visual.tokenization_html(math, 27)  # "." replaced the draft " and"
    rows = grid_rows(html)
    dot = next(b for b in rows["response"] if "el-current" in b["cls"])
    drafted = next(b for b in rows["qwen (drafter)"] if b["text"] == "·and")
    assert dot["text"] == "." and columns(dot) == columns(drafted)
    assert visual.tokenization_html(math, 26).count("struck") == 0  # a kept token strikes nothing
