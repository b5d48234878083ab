"""The standalone pages a run, a comparison and a tokenization are exported as (:mod:`visual.export`)."""

from __future__ import annotations

import re

import visual
from ensemble.trace import RunTrace
from tests.conftest import FIXTURES


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


def test_an_exported_page_is_set_in_the_apps_font_and_shows_its_inspector_on_a_click():
    """Issue 39: the exported page fell back to the reader's default sans (DejaVu here) while the app shows its
    theme's font; the inspector under a long strip stayed off screen on a click. The font goes in as data (no
    file from elsewhere; the app's theme takes the same declaration), and the click scrolls the inspector up; an
    evaluation report's many answer pages leave the font out."""
    from visual.fonts import TEXT_FONT, TEXT_STACK

    trace = RunTrace.from_json((FIXTURES / "safe.json").read_text(encoding="utf-8"))
    page = visual.run_document(trace)
    faces = re.findall(r'@font-face \{ font-family: "([^"]+)"; src: url\(data:font/woff2;base64,[A-Za-z0-9+/=]{1000,}\)', page)
    assert faces == [TEXT_FONT, TEXT_FONT]  # regular and bold
    assert re.search(r"body \{ font-family: " + re.escape(TEXT_STACK), page)
    assert "scrollIntoView" in page and "url(http" not in page
    assert "@font-face" in visual.compare_document({"safe": trace}) and "@font-face" not in visual.run_document(trace, embed_fonts=False)
