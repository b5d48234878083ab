"""The evaluation explorer on a real evaluation folder (tests/fixtures/evaluation/gsm8k-3: three GSM8K questions x
four methods of the embedded models, with traces; make_eval_fixture.py) and on a folder written before traces were
kept (docs/results/gsm8k-60-llamacpp): the grid and its filters, where two answers part and what decided it, the
decision statistics against hand counts, report.html, the explain command, the Results tab's handlers."""

from __future__ import annotations

import json
import re
import shutil
import zipfile
from pathlib import Path

import pytest

import visual
from ensemble.cli.parser import main as cli_main
from ensemble.cli.report import write_html_report
from ensemble.decisions import Decision
from ensemble.errors import EvaluationError
from ensemble.evaluation import rebuild_report
from ensemble.evaluation.decision_stats import decision_stats, string_kind
from ensemble.evaluation.divergence import answers_divergence, divergence, token_at
from ensemble.evaluation.explorer import FILTERS, cell_of, filter_questions, open_folder
from ensemble.evaluation.traces import NO_TRACES
from visual.evalreport import answer_page
from visual.explorer import divergence_html, grid_html

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "evaluation" / "gsm8k-3"
OLD = ROOT / "docs" / "results" / "gsm8k-60-llamacpp"
METHODS = ["single:qwen", "single:smollm2", "safe-unite", "specem"]


@pytest.fixture(scope="module")
def folder():
    return open_folder(FIXTURE)


# -- the folder and its grid ---------------------------------------------------------------------------------------
def test_the_fixture_folder_opens_with_a_trace_for_every_answer(folder):
    assert folder.methods == METHODS and folder.question_ids == [0, 1, 2]
    assert folder.has_traces and folder.traces_note == ""
    assert folder.traced == {(q, m) for q in range(3) for m in METHODS}
    for row in folder.rows:
        trace = folder.trace(row["qid"], row["method"])
        assert trace.text == row["text"] and trace.stats.generated_tokens == row["tokens"]


def test_grid_cells_follow_the_rows(folder):
    cells = folder.cells()
    for row in folder.rows:
        cell = cells[(row["qid"], row["method"])]
        assert cell.outcome == ("right" if row["correct"] else "wrong")
        assert ("budget" in cell.flags) == (row["stop_reason"] == "budget")
        assert cell.traced
    html = grid_html(folder, folder.question_ids)
    assert html.count('class="el-cell') == 12 and "el-no-traces" not in html
    for (q, m), cell in cells.items():
        assert f'data-qid="{q}" data-method="{m}"' in html


def test_cell_states_and_flags():
    row = {"qid": 1, "method": "m", "correct": False, "looping": True, "corrupted": True, "stop_reason": "budget", "text": "x"}
    assert cell_of(row, 1, "m").flags == ("loop", "corrupted", "budget")
    assert cell_of({**row, "error": "boom", "text": ""}, 1, "m").outcome == "error"
    assert cell_of(None, 1, "m").outcome == "missing"


def test_filters_pick_the_questions_by_hand(folder):
    right = {(r["qid"], r["method"]): bool(r["correct"]) for r in folder.rows}
    best = folder.best_single()
    assert best == max(["single:qwen", "single:smollm2"], key=lambda m: sum(right[(q, m)] for q in range(3)))
    for ensemble in ("safe-unite", "specem"):
        assert filter_questions(folder, "single_right_ensemble_wrong", ensemble) == [
            q for q in range(3) if right[(q, best)] and not right[(q, ensemble)]]
        assert filter_questions(folder, "ensemble_right_single_wrong", ensemble) == [
            q for q in range(3) if right[(q, ensemble)] and not right[(q, best)]]
    assert filter_questions(folder, "disagree") == [q for q in range(3) if len({right[(q, m)] for m in METHODS}) == 2]
    assert filter_questions(folder, "all_wrong") == [q for q in range(3) if not any(right[(q, m)] for m in METHODS)]
    assert filter_questions(folder, "all", sort="qid_desc") == [2, 1, 0]
    by_right = filter_questions(folder, "all", sort="right")
    counts = [sum(right[(q, m)] for m in METHODS) for q in by_right]
    assert counts == sorted(counts)
    with pytest.raises(EvaluationError, match="Unknown grid filter"):
        filter_questions(folder, "nope")
    assert set(FILTERS) >= {"single_right_ensemble_wrong", "ensemble_right_single_wrong"}


# -- a folder written before traces were kept ---------------------------------------------------------------------
def test_an_old_folder_without_traces_opens_and_says_so():
    old = open_folder(OLD)
    assert not old.has_traces and old.traces_note == NO_TRACES
    assert len(old.question_ids) == 60 and len(old.methods) == 9
    html = grid_html(old, old.question_ids)
    assert "No traces kept for this run" in html and html.count('class="el-cell') == 540
    assert old.trace(old.question_ids[0], "single:qwen") is None
    with pytest.raises(EvaluationError, match="No traces kept for this run"):
        answers_divergence(old, old.question_ids[0], ("single:qwen", "safe-unite"))
    # the filter the issue names, by hand on the rows: qwen alone right where the default ensemble is wrong
    right = {(r["qid"], r["method"]): bool(r["correct"]) for r in old.rows}
    assert old.best_single() == "single:qwen"
    expected = [q for q in old.question_ids if right[(q, "single:qwen")] and not right[(q, "safe-unite@qwen+smollm2")]]
    assert filter_questions(old, "single_right_ensemble_wrong", "safe-unite@qwen+smollm2") == expected


# -- where two answers part ------------------------------------------------------------------------------------------
def test_token_at_finds_the_covering_token(folder):
    trace = folder.trace(0, "single:qwen")
    for t in trace.tokens[:20]:
        if t.end > t.start:
            assert token_at(trace, t.start) == t.index and token_at(trace, t.end - 1) == t.index
    assert token_at(trace, len(trace.text) + 5) is None


def test_report_html_has_the_grid_its_filters_and_the_statistics(folder, tmp_path):
    out = tmp_path / "gsm8k-3"
    shutil.copytree(FIXTURE, out)
    rebuild_report(out, write_html=write_html_report)
    html = (out / "report.html").read_text(encoding="utf-8")
    assert html.count('class="el-cell') == 12 and 'id="el-filter"' in html and 'id="el-order"' in html
    views = json.loads(re.search(r'id="el-grid-views">(.*?)</script>', html).group(1))
    for ensemble in ("safe-unite", "specem"):
        key = f"single_right_ensemble_wrong|{ensemble}|qid"
        assert views[key] == filter_questions(folder, "single_right_ensemble_wrong", ensemble)
    answers = json.loads(re.search(r'id="el-answers">(.*?)</script>', html).group(1))
    assert len(answers) == 12
    for (q, m) in folder.traced:  # each cell links to its answer's own page: strip and inspector, offline
        page = out / answer_page(m, q)
        assert page.exists() and 'class="el-strip"' in page.read_text(encoding="utf-8")
        assert answer_page(m, q).replace("%", "%25") in answers[f"{q}|{m}"]  # the link, quoted as a URL
    assert "Decisions per 100 tokens" in html and "Replacements against correctness" in html
    assert "SpecEM weights over rounds, every question" in html  # the trajectories chart


def test_report_of_an_old_folder_says_it_kept_no_traces(tmp_path):
    out = tmp_path / "old"
    shutil.copytree(OLD, out)
    rebuild_report(out, write_html=write_html_report)
    html = (out / "report.html").read_text(encoding="utf-8")
    assert html.count('class="el-cell') == 540 and "No traces kept for this run" in html
    assert not (out / "answers").exists()


def test_explain_command_prints_both_answers_where_they_part_and_the_decisions(folder, capsys):
    pair = _parting_pair(folder)
    assert cli_main(["explain", str(FIXTURE), "--qid", str(pair[0]), "--methods", ",".join(pair[1:])]) == 0
    printed = capsys.readouterr().out
    div = answers_divergence(folder, pair[0], pair[1:])
    assert f"== {pair[1]} (" in printed and f"== {pair[2]} (" in printed and "‖" in printed
    for line in div.lines():
        assert line in printed
    assert cli_main(["explain", str(FIXTURE), "--qid", "7", "--methods", ",".join(pair[1:])]) == 2
    assert "Question 7 is not in this evaluation" in capsys.readouterr().err
    assert cli_main(["explain", str(OLD), "--qid", "23", "--methods", "single:qwen,safe-unite"]) == 2
    assert "No traces kept for this run" in capsys.readouterr().err


def _parting_pair(folder) -> tuple[int, str, str]:
    """The first question where qwen alone and SAFE wrote different answers (the fixture has one)."""
    for q in folder.question_ids:
        if folder.row(q, "single:qwen")["text"] != folder.row(q, "safe-unite")["text"]:
            return q, "single:qwen", "safe-unite"
    raise AssertionError("the fixture's qwen and SAFE answers are all equal")


# -- the Results tab's handlers ------------------------------------------------------------------------------------
def test_results_tab_opens_a_zipped_folder_and_a_cell_opens_its_trace(folder, tmp_path):
    from ui import results

    archive = tmp_path / "gsm8k-3.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for path in FIXTURE.rglob("*"):
            if path.is_file():
                zf.write(path, Path("gsm8k-3") / path.relative_to(FIXTURE))
        zf.writestr("gsm8k-3/../../evil.txt", "not taken")  # only an evaluation folder's own files are unpacked
    summary, explorer, opened = results.open_evaluation(archive)
    assert opened is not None and opened.traced == folder.traced and "<table" in summary.results_view
    assert not (tmp_path / "evil.txt").exists() and not list(opened.path.rglob("evil.txt"))
    assert explorer.grid.count('class="el-cell') == 12
    trace, note = results.open_cell(opened, {"qid": 1, "method": "safe-unite", "seq": 1})
    assert trace is not None and trace.text == folder.row(1, "safe-unite")["text"] and "Run" in note
    assert results.open_cell(opened, {"qid": "1", "method": "safe-unite"})[0] is None  # not a cell's data
    assert results.filtered_grid(opened, "all", None, "qid_desc").index('data-qid="2"') < results.filtered_grid(
        opened, "all", None, "qid_desc").index('data-qid="0"')
    q, a, b = _parting_pair(folder)
    assert "What each run decided where they part" in results.parting_view(opened, q, a, b)
    assert "el-error" in results.parting_view(opened, q, a, a)


def test_results_tab_on_an_old_folder_shows_the_answer_text_and_the_note():
    from ui import results

    summary, explorer, opened = results.open_evaluation(OLD)
    assert "No traces kept" in explorer.grid and "No traces kept" in explorer.stats_view
    trace, note = results.open_cell(opened, {"qid": 23, "method": "single:qwen"})
    assert trace is None and "No traces kept for this run" in note and "candle" in note


def test_a_zip_without_an_evaluation_folder_is_refused(tmp_path):
    from ui import results

    archive = tmp_path / "x.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("notes.txt", "hello")
    summary, explorer, opened = results.open_evaluation(archive)
    assert opened is None and "holds no evaluation folder" in summary.results_view
    (tmp_path / "bad.zip").write_bytes(b"not a zip")
    assert "not a readable .zip" in results.open_evaluation(tmp_path / "bad.zip")[0].results_view


def test_results_look_the_scatter_has_no_overlapping_labels_and_the_table_scrolls_in_its_box():
    from ensemble.evaluation import load_summary

    rows = load_summary(OLD)
    scatter, _ = visual.results_figures(rows)
    assert all(t.mode == "markers" for t in scatter.data)  # names in the legend, not beside points that overlap
    assert visual.results_html(rows).startswith('<div class="el-table-scroll"')
