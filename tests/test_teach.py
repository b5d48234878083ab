"""Issue 28: what a teacher and a researcher read. The blocked verifier's row at a round's first token, one E/T
format, labels of the decisions a method can produce, plain first sentences, the CLI's legend and caret line."""

from __future__ import annotations

import pytest

import visual
from ensemble.methods import generate
from ensemble.settings import Settings

GERMAN = "Franz fuhr nach Frankfurt und dann nach Bremen."


@pytest.fixture(scope="module")
def blocked_run(tiny):
    """SAFE with gemma3 drafting and qwen verifying, short rounds: many draft tokens start inside one of qwen's
    tokens that began before the round (its "Fra" over a committed "F" and a drafted "ra")."""
    return generate([tiny["gemma3"], tiny["qwen"]], GERMAN, "safe", Settings(max_new_tokens=24, stop_strings=[], lookahead=3))


def test_a_blocked_verifier_has_its_row_where_its_token_starts_before_the_round(blocked_run):
    trace = blocked_run
    blocked = [t for t in trace.tokens if t.decision == "oov_blocked" and t.condition == "misaligned"]
    assert blocked
    for record in blocked:
        assert set(record.details.verifier_from) == set(record.details.blocked_by), record.index
        assert list(record.details.per_model_top) == ["tiny-gemma3", "tiny-qwen"]
    # the case the issue saw: the first token of a round, whose verifier token started in an earlier round
    starts = {r.start for r in trace.rounds}
    first = [t for t in blocked if t.start in starts and t.details.verifier_from["tiny-qwen"] < t.start]
    assert first, "no blocked round-opening token in this run"
    record = first[0]
    text = visual.explain(trace, record.index)
    assert "Where its own token starts" in text and "tiny-qwen" in text
    fig = visual.topk_figure(trace, record.index)
    assert [a.text for a in fig.layout.annotations][:2] == ["tiny-gemma3", "tiny-qwen"]
