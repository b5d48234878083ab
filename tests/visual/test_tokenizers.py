"""The Tokenizers tab's alignment of the models' cuts (:mod:`visual.tokenizers`)."""

from __future__ import annotations

import visual
from tests.visual.helpers import columns, comparison, grid_items


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
