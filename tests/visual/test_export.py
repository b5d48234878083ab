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
