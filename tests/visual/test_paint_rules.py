"""The rules behind what the browser paints (measured in tests/test_browser_paint.py): which tokens are code, and
the stylesheet's switches that keep every glyph in its own token's box."""

from __future__ import annotations

import itertools
import json
import re

import visual
from ensemble.trace import RunTrace
from tests.conftest import FIXTURES
from visual.strip import in_code


def test_code_is_the_fenced_text_and_a_streamed_strip_draws_it_the_same():
    text = "Here:\n```python\ndef f(x):\n    return x\n```\nDone"
    opening, closing = text.index("```"), text.rindex("```")
    assert not in_code(text, 0, 4)
    assert in_code(text, opening, opening + 3) and in_code(text, opening + 3, opening + 9)  # the fence, its language
    assert in_code(text, text.index("def"), text.index("def") + 3) and in_code(text, closing, closing + 3)
    assert in_code(text, opening + 1, opening + 3)  # a token that ends a fence cut over two tokens
    assert not in_code(text, text.index("Done"), len(text))
    data = json.loads((FIXTURES / "single.json").read_text())  # the fixture's record, cut into this text
    cuts = ["Here", ":\n", "``", "`python", "\n", "def", " f", "(x", "):\n", "    return", " x", "\n", "```", "\n", "Done"]
    assert "".join(cuts) == text
    bounds = list(itertools.accumulate(map(len, cuts), initial=0))
    data["tokens"] = [dict(data["tokens"][0], index=i, text=c, start=a, end=b) for i, (c, a, b) in
                      enumerate(zip(cuts, bounds, bounds[1:], strict=False))]
    data["text"] = text
    trace = RunTrace.from_dict(data) if hasattr(RunTrace, "from_dict") else RunTrace.from_json(json.dumps(data).encode())
    whole = visual.strip_html(trace)
    code = [int(i) for i in re.findall(r'class="el-tok [^"]*\bcode\b[^"]*" data-i="(\d+)"', whole)]
    assert code == list(range(3, 13))  # from the token that completes the fence to the closing fence
    builder = visual.StripBuilder(trace.method, trace.models)
    chunks = [builder.add([r], text[: r.end]) for r in trace.tokens]  # as it streams: the text so far
    assert "".join(chunks) == whole


def test_token_views_turn_off_ligatures_and_kerning():
    css = visual.CSS
    rule = re.search(r"([^{}/]*)\{\s*font-variant-ligatures: none; font-kerning: none;[^}]*\}", css)
    assert rule, "no rule turns ligatures and kerning off"
    selectors = {s.strip() for s in rule.group(1).split(",")}
    assert {".el-strip", ".el-tok", ".el-grid-block", ".el-fork-side", ".el-compare", ".el-table"} <= selectors
    assert '"liga" 0' in rule.group(0) and '"kern" 0' in rule.group(0)
    assert re.search(r"\.el-tok\.code \{ font-family: var\(--el-mono\)", css)
