"""What the tests of server members share (issue 36): the GSM8K questions they run, and the comparison of a run on
server members with the same run in process (same tokens and decisions, up to a documented near-tie allowance)."""

from __future__ import annotations

import json

import visual
from ensemble.methods import generate
from ensemble.settings import Settings
from tests.conftest import ROOT
from tests.visual.helpers import plain

with open(ROOT / "ensemble/data/gsm8k/test.jsonl") as f:
    QUESTIONS = [json.loads(line)["question"] for line in f][:2]


def _probs(record) -> dict:
    """What each member gave the deciding keys at a token (SAFE's per-model tops, a fusion's per-model rows)."""
    details = record.details
    tops = getattr(details, "per_model_top", None) or {}
    return {(m, key): p for m, top in tops.items() for key, p in top}


def assert_same_runs(local, remote, method: str, budget: int, k: int = 20) -> list[tuple[int | None, int]]:
    """Each question run in process (``local``) and on server members (``remote``) gives the same tokens and
    decisions. A difference is allowed only after the first 10 tokens, and only where every probability both sides
    read there agrees within 0.05 (a near tie the two computations decide apart, not another position's rows).
    Returns, per question, the index of the first difference (None: none) and how many tokens were compared."""
    settings, found = Settings(max_new_tokens=budget), []
    for question in QUESTIONS:
        here, there = generate(local, question, method, settings), generate(remote, question, method, settings)
        assert there.stats.stop_reason == "budget" and all(there.stats.member_bytes.values())
        marked = [t for t in there.tokens if t.details.outside_top_k]
        assert bool(marked) == any("outside" in w and "approximated" in w for w in there.warnings)
        for t in marked[:1]:  # the inspector names the member and its k
            name = next(iter(t.details.outside_top_k))
            assert f"outside {name}'s top {k}" in plain(visual.explain(there, t.index))
        ours = [(t.text, t.decision, t.model) for t in here.tokens]
        theirs = [(t.text, t.decision, t.model) for t in there.tokens]
        if ours == theirs:
            assert there.text == here.text
            found.append((None, len(ours)))
            continue
        first = next((i for i, (a, b) in enumerate(zip(ours, theirs, strict=False)) if a != b), min(len(ours), len(theirs)))
        assert first >= 10, (first, ours[first:first + 1], theirs[first:first + 1])
        a, b = _probs(here.tokens[first]), _probs(there.tokens[first])
        shared = a.keys() & b.keys()
        assert shared and all(abs(a[key] - b[key]) < 0.05 for key in shared), (first, a, b)
        found.append((first, len(ours)))
    return found
