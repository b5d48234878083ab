"""The Results tab's "Find the decision that changed this answer" (ui.blaming) on the fixture: a search run by the
app (scripted forks in place of the models) marks the cell, opens the decisive token with the counterfactual and
the graded outcome, and feeds the dataset table; a recorded attribution shows without any fork."""

from __future__ import annotations

from ensemble.evaluation.blame_store import run_batch
from ensemble.evaluation.explorer import open_folder
from tests.ensemble.evaluation.test_blame import lost, scripted  # noqa: F401 - the fixture is used by name
from ui import blaming


def test_the_app_finds_the_decision_then_opens_it_with_the_counterfactual(lost, monkeypatch):  # noqa: F811
    fork = scripted(flip_at=44)
    monkeypatch.setattr(blaming, "model_forks", lambda pool, advance=None: fork)
    folder = open_folder(lost)
    assert blaming.blame_marks(folder) == {(0, "safe-unite"): "find the decision", (0, "specem"): "find the decision"}
    ticks = []
    html = blaming.find(folder, 0, "safe-unite", progress=lambda value, desc="": ticks.append((value, desc)))
    assert "the decisive decision is token #44, a sharpening swap" in html and 'data-open-token="44"' in html
    assert ticks[-1] == ((2, 3), "reverted token #44: answers 71") and len(fork.asked) == 2
    assert blaming.blame_marks(folder)[(0, "safe-unite")] == "decisive: #44"
    trace, index, view, status = blaming.open_token(folder, {"qid": 0, "method": "safe-unite", "index": 44})
    assert index == 44 and trace.text == folder.trace(0, "safe-unite").text
    assert "it answers 71 (right)" in view and "with the key" in view and "<ins>71</ins>" in view
    assert status.startswith("Question 0, safe-unite: answered 3, gold 71 (wrong). Token #44")
    table, chart = blaming.stats(folder)
    assert "sharpening swap 1" in table and chart is not None
    assert blaming.open_token(folder, {"qid": 0, "method": "safe-unite", "index": 21})[0] is None  # not the decisive one


def test_a_recorded_attribution_shows_without_forks(lost, monkeypatch):  # noqa: F811
    run_batch(open_folder(lost), ["safe-unite"], None, scripted(flip_at=21), say=lambda line: None)

    def no_models(pool, advance=None):
        raise AssertionError("a recorded attribution needs no fork")

    monkeypatch.setattr(blaming, "model_forks", no_models)
    folder = open_folder(lost)
    assert blaming.blame_marks(folder)[(0, "safe-unite")] == "decisive: #21"
    assert "token #21, a consensus outvote" in blaming.find(folder, 0, "safe-unite")
    assert "both wrong" in blaming.find(folder, 1, "safe-unite")


def test_blame_answer_reads_the_shipped_attribution_of_question_411(monkeypatch):
    """The committed run's blame.jsonl (docs/results.md, issue 38): question 411, lost by the default ensemble, has
    no single decisive decision; the API answers from the record, no model loaded."""
    import gradio as gr
    import pytest

    monkeypatch.setattr(blaming, "model_forks", lambda pool, advance=None: pytest.fail("a recorded attribution needs no fork"))
    found = blaming.blame_answer("411", "safe-unite@qwen+smollm2")
    assert (found["status"], found["outcome"], found["reference"], found["decisive"]) == ("none", "lost", "single:qwen", None)
    assert [(e["index"], e["kind"], e["prediction"]) for e in found["tried"]] == [
        (1, "outvote", "2700"), (32, "outvote", "4"), (67, "sharpening", "470")]
    with pytest.raises(gr.Error, match="both"):
        blaming.blame_answer(23, "safe-unite@qwen+smollm2")


def test_the_pair_view_and_the_cell_say_what_each_answer_is(lost):  # noqa: F811
    from ui import results
    from visual.explorer import cell_html

    folder = open_folder(lost)
    html = results.parting_view(folder, 0, "single:qwen", "safe-unite")
    assert ("<b>Question 0</b>: single:qwen answered 71, gold 71: right; safe-unite answered 3, gold 71: wrong." in html)
    cell = cell_html(folder.cells()[(0, "safe-unite")], "find the decision")
    assert '>✗ <span class="el-given">3</span>' in cell and '<small class="el-gold">#0 · gold 71</small>' in cell
    assert 'data-blame="1"' in cell


def test_a_cell_asks_and_the_search_runs_next(lost, monkeypatch):  # noqa: F811
    fork = scripted(flip_at=44)
    monkeypatch.setattr(blaming, "model_forks", lambda pool, advance=None: fork)
    folder = open_folder(lost)
    note = blaming.ask(folder, 0, "safe-unite")
    assert "reverting the ensemble" in note and fork.asked == []  # the click answers at once, no fork yet
    assert "token #44" in blaming.run_asked(folder) and blaming.run_asked(folder) is None
    assert "token #44" in blaming.ask(folder, 0, "safe-unite") and len(fork.asked) == 2  # now recorded: no new fork
