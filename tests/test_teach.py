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


def test_a_forced_key_is_the_forks_first_token_and_the_method_goes_on(tiny, blocked_run):
    """"What if it had chosen this?": a key that is no token of the drafter, put at token N as text; every model
    re-syncs and SAFE continues with the run's models and settings."""
    from ensemble.fork import check_force, compare_continuations, fork_method_for, run_fork
    from ensemble.trace import RunTrace

    trace, at, force = blocked_run, 5, " Zugspitzbahnhof"
    assert tiny["gemma3"].keys.encode(force) != [] and len(tiny["gemma3"].keys.encode(force)) > 1  # not one token
    method = fork_method_for(trace, None, force)
    assert method == "safe"
    forked, comparison = run_fork([tiny["gemma3"], tiny["qwen"]], trace, at, method, force=force)
    chars = trace.tokens[at].start
    assert forked.fork == {"at": at, "chars": chars, "method": "safe", "models": trace.models, "force": force}
    first = forked.tokens[0]
    assert (first.text, first.start, first.end) == (force, chars, chars + len(force)) and first.details.forced
    assert forked.text[chars:].startswith(force) and len(forked.tokens) > 3  # the method went on after it
    assert forked.method == "safe" and forked.models == trace.models and forked.settings["lookahead"] == 3
    assert {t.decision for t in forked.tokens[1:]} - {"drafter"}  # SAFE's decisions, not a plain continuation
    assert comparison.forked.startswith(force) and comparison.divergence == 0
    RunTrace.from_json(forked.to_json())  # the checks an uploaded trace passes
    html = visual.fork_html(trace, forked, compare_continuations(trace, forked).to_dict())
    assert "forced there" in html and "Zugspitzbahnhof" in html and "They differ from their first character" in html
    assert "You chose" in visual.explain(forked, 0)
    for bad, message in (("<eos>", "stop"), ("<0xE4>", "byte"), ("x" * 300, "at most")):
        with pytest.raises(Exception, match=message):
            check_force(bad)


def test_parting_sentences_count_in_words():
    from visual.forks import parting_sentence

    assert parting_sentence(0, 16).startswith("They differ from their first character; 16 stretches of words differ")
    assert parting_sentence(1, 1).startswith("They part after 1 character of the continuation; 1 stretch of words differs")
    assert "(s)" not in parting_sentence(12, 2) and "12 characters" in parting_sentence(12, 2)
