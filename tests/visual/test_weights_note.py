"""The text next to SpecEM's weights chart: what the weights mean and, when they stay flat, why."""

from __future__ import annotations

from ensemble.trace import RoundRecord, RunTrace
from visual import weights_note


def _trace(eta: float, after: list[dict], rewards: dict | None = None) -> RunTrace:
    start = {"a": 0.5, "b": 0.5}
    rounds, before = [], start
    for i, w in enumerate(after):
        rounds.append(RoundRecord(index=i, start=0, weights_before=before, weights_after=w, rewards=rewards or {},
                                  winner="a", candidates=[{"model": "a"}, {"model": "b"}]))
        before = w
    return RunTrace(method="specem", models=["a", "b"], settings={"eta": eta}, prompt="p", rounds=rounds)


def test_moving_weights_are_explained_without_an_excuse():
    html = weights_note(_trace(4.0, [{"a": 0.6, "b": 0.4}, {"a": 0.7, "b": 0.3}], {"a": 1.0, "b": 0.25}))
    assert "multiplies its scores" in html and "won 2 of 2 segments" in html and "Why the lines stay flat" not in html


def test_flat_weights_say_why():
    flat = [{"a": 0.505, "b": 0.495}] * 3
    assert "rewards did not separate" in weights_note(_trace(0.5, flat, {"a": 0.5, "b": 0.5}))
    assert "feedback is off" in weights_note(_trace(0.0, [{"a": 0.5, "b": 0.5}]))
    assert "no round had two or more candidates" in weights_note(_trace(0.5, flat))
    assert weights_note(RunTrace(method="safe", models=["a"], settings={}, prompt="p")) == ""


def test_model_names_are_escaped():
    trace = _trace(4.0, [{"<b>x": 0.9, "b": 0.1}])
    assert "<b>x" not in weights_note(trace)
