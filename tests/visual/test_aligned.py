"""The aligned blocks of the Tokenizers tab (:mod:`visual.aligned`)."""

from __future__ import annotations

import re
from itertools import pairwise

import visual
from tests.visual.helpers import grid_items


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
