"""SAFE's provisional drafts (issue 37, Deliver 4): each drafted token streams as a ``DraftEvent`` before its round is
verified, the round's verified tokens agree with the drafts they decide, and the trace is the one ``generate`` makes."""

from __future__ import annotations

import json

import pytest

from ensemble.methods import DraftEvent, EnsembleRun, RoundEvent, StatusEvent, TokenEvent
from ensemble.settings import Settings
from ensemble.trace import Decision
from tests.ensemble.methods.test_golden_traces import GOLDEN, same
from tests.golden_runs import PROMPT, RUNS, normalized


@pytest.mark.parametrize("name", ["safe", "safe_gac_sampled"])
def test_drafts_precede_and_agree_with_the_verified_tokens(tiny, name):
    names, method, settings = RUNS[name]
    models = [tiny[n] for n in names]
    job = EnsembleRun(models, PROMPT, method, Settings(stop_strings=[], **settings))
    events = list(job.events())
    trace = job.trace
    same(normalized(trace), json.loads((GOLDEN / f"{name}.json").read_text()))  # the golden trace, unchanged
    assert all(e.provisional for e in events if isinstance(e, DraftEvent))
    assert not any(e.provisional for e in events if not isinstance(e, DraftEvent))  # every event class says it
    drafts: dict[int, list[DraftEvent]] = {}
    verified = set()
    for event in events:
        if isinstance(event, DraftEvent):
            assert event.round not in verified  # a draft streams before its round is decided
            assert event.index == len(drafts.setdefault(event.round, []))  # one event per drafted token, in order
            drafts[event.round].append(event)
        elif isinstance(event, RoundEvent):
            verified.add(event.record.index)
    assert sorted(drafts) == [r.index for r in trace.rounds]
    replaced = 0
    for record in trace.rounds:
        shown = drafts[record.index]
        last = shown[-1]
        # the round's draft, as its record keeps it, is what its drafts spelt, token by token, after the text so far
        assert last.text[record.start :] == record.candidates[0]["text"] and len(shown) == record.candidates[0]["tokens"]
        assert all(e.model == trace.drafter and e.text.startswith(trace.text[: record.start]) for e in shown)
        assert "".join(e.text[e.start : e.end] for e in shown) == record.candidates[0]["text"]
        tokens = [t for t in trace.tokens if t.round == record.index]
        accepted = record.details["accepted"]
        for draft, token in zip(shown[:accepted], tokens, strict=False):  # kept drafts are the verified tokens
            assert token.text == draft.key and token.model == draft.model
            assert trace.text[token.start : token.end] == draft.text[token.start : token.end]
        if record.details["replaced"]:
            swap = tokens[accepted]
            assert swap.decision == Decision.ENSEMBLED_REPLACED and swap.fusion.draft == shown[accepted].key
            replaced += 1
    assert replaced == trace.stats.decisions.get("ensembled_replaced")


def passes_before_first_shown(job: EnsembleRun) -> dict[str, tuple[int, int]]:
    """Each member's forward passes and tokens computed when the run's first token (drafted or verified) streamed."""
    for event in job.events():
        if isinstance(event, DraftEvent | TokenEvent):
            seen = {a.name: (a.stats.passes, a.stats.tokens) for a in job.adapters}
            break
    for _ in job.events():
        pass
    return seen


def test_safes_first_shown_token_costs_what_the_drafter_alones_first_token_costs(tiny):
    """What makes SAFE's first token on screen come when the drafter alone's does: the same work before it (the
    drafter reads the prompt and draws one token; no verifier has computed anything), whatever the machine's load."""
    models = [tiny["qwen"], tiny["smollm2"], tiny["gemma3"]]
    settings = Settings(max_new_tokens=4, stop_strings=[])
    alone = passes_before_first_shown(EnsembleRun(models[:1], PROMPT, "single", settings))
    safe = passes_before_first_shown(EnsembleRun(models, PROMPT, "safe", settings))
    assert safe == {**alone, "tiny-smollm2": (0, 0), "tiny-gemma3": (0, 0)}


def test_only_safe_streams_drafts_and_the_first_comes_first(tiny):
    models = [tiny["qwen"], tiny["smollm2"]]
    events = list(EnsembleRun(models, PROMPT, "safe", Settings(max_new_tokens=8, stop_strings=[])).events())
    first = next(i for i, e in enumerate(events) if not isinstance(e, DraftEvent))
    assert first > 0 and isinstance(events[first], StatusEvent)  # the first round's drafts, one by one, come first
    assert [(e.round, e.index) for e in events[:first]] == [(0, j) for j in range(first)]
    for method in ("single", "unite", "specem"):
        run = EnsembleRun(models, PROMPT, method, Settings(max_new_tokens=6, stop_strings=[]))
        assert not any(isinstance(e, DraftEvent) for e in run.events())
