"""The defensive readers of trace records (:mod:`visual.records`): an uploaded trace's free-form details never crash a view."""

from __future__ import annotations

import visual
from tests.visual.helpers import NAMES, groups_of, load, parse_strip


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
