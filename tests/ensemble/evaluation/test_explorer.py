"""The evaluation explorer on a real evaluation folder (tests/fixtures/evaluation/gsm8k-3: three GSM8K questions x
three methods of the embedded models, with traces; make_eval_fixture.py) and on a folder written before traces were
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
from ensemble.errors import EvaluationError
from ensemble.evaluation import rebuild_report
from ensemble.evaluation.decision_stats import decision_stats, string_kind
from ensemble.evaluation.divergence import answers_divergence, divergence, token_at
from ensemble.evaluation.explorer import FILTERS, cell_of, filter_questions, open_folder
from ensemble.evaluation.traces import NO_TRACES
from ensemble.trace.decisions import Decision
from tests.conftest import ROOT
from visual.evalreport import answer_page
from visual.evalstats import blocked_table as visual_blocked_table
from visual.evalstats import stats_figures as visual_stats_figures
from visual.explorer import divergence_html, grid_html

FIXTURE = ROOT / "tests" / "fixtures" / "evaluation" / "gsm8k-3"
OLD = ROOT / "docs" / "results" / "gsm8k-60-llamacpp"
METHODS = ["single:qwen", "safe-unite", "specem"]


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
    assert html.count('class="el-cell') == 9 and "el-no-traces" not in html
    for q, m in cells:
        assert f'data-qid="{q}" data-method="{m}"' in html


def test_cell_states_and_flags():
    row = {"qid": 1, "method": "m", "correct": False, "looping": True, "corrupted": True, "stop_reason": "budget", "text": "x"}
    assert cell_of(row, 1, "m").flags == ("loop", "corrupted", "budget")
    assert cell_of({**row, "error": "boom", "text": ""}, 1, "m").outcome == "error"
    assert cell_of(None, 1, "m").outcome == "missing"


def test_filters_pick_the_questions_by_hand(folder):
    right = {(r["qid"], r["method"]): bool(r["correct"]) for r in folder.rows}
    best = folder.best_single()
    assert best == "single:qwen"  # the one single model
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


def test_the_projects_run_ships_every_answers_trace_and_the_button_opens_it():
    """The Results tab's button opens the project's traced GSM8K run (docs/results.md): 60 questions x 4 methods,
    each row with its trace, the trace's text the row's answer; and a question where qwen alone and the default
    ensemble part shows the decision that did it."""
    from ui import results

    run = open_folder(results.COMMITTED_RUN)
    assert results.COMMITTED_RUN == ROOT / "docs" / "results" / "gsm8k-60-traced"
    assert len(run.question_ids) == 60 and len(run.rows) == 240 and run.traces_note == ""
    assert run.traced == {(r["qid"], r["method"]) for r in run.rows}
    for row in run.rows:
        trace = run.trace(row["qid"], row["method"])
        assert trace.text == row["text"] and trace.stats.generated_tokens == row["tokens"]
    ensemble = "safe-unite@qwen+smollm2"
    lost = filter_questions(run, "single_right_ensemble_wrong", ensemble)
    right = {(r["qid"], r["method"]): bool(r["correct"]) for r in run.rows}
    assert lost == [q for q in run.question_ids if right[(q, "single:qwen")] and not right[(q, ensemble)]] != []
    parted = results.explain_run(lost[0], f"single:qwen,{ensemble}")
    assert parted["divergence"] is not None and parted["decisions"] and parted["texts"][0] != parted["texts"][1]


# -- where two answers part ------------------------------------------------------------------------------------------
def test_where_a_token_edge_meets_a_longer_token_the_run_that_ended_there_decided():
    """Question 857 of the project's run: qwen alone wrote " these", the default ensemble " the" + " steps". The
    texts part at the "s" after " the", inside qwen's " these" but at the ensemble's token edge: what decided it is
    the ensemble's " the" (a replaced draft), not its " steps" (consensus) that starts there."""
    from ui.results import COMMITTED_RUN

    run, ensemble = open_folder(COMMITTED_RUN), "safe-unite@qwen+smollm2"
    div = answers_divergence(run, 857, ("single:qwen", ensemble))
    qwen, ens = (div.traces[i].tokens[div.indices[i]] for i in (0, 1))
    assert div.traces[0].text[qwen.start:qwen.end] == " these" and div.traces[1].text[ens.start:ens.end] == " the"
    assert ens.end == div.at and ens.decision == Decision.ENSEMBLED_REPLACED and ens.fusion.draft == " these"
    assert token_at(div.traces[1], div.at) == div.indices[1] + 1  # the covering token, " steps", is the next one
    assert f"with ' the' (token #{div.indices[1]})" in div.lines()[2]


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
    assert not (out / "answers").exists()  # answer pages only when asked
    assert cli_main(["report", str(out), "--answer-pages", "disagree"]) == 0
    html = (out / "report.html").read_text(encoding="utf-8")
    assert html.count('class="el-cell') == 9 and 'id="el-filter"' in html and 'id="el-order"' in html
    views = json.loads(re.search(r'id="el-grid-views">(.*?)</script>', html).group(1))
    for ensemble in ("safe-unite", "specem"):
        key = f"single_right_ensemble_wrong|{ensemble}|qid"
        assert views[key] == filter_questions(folder, "single_right_ensemble_wrong", ensemble)
    answers = json.loads(re.search(r'id="el-answers">(.*?)</script>', html).group(1))
    assert len(answers) == 9
    disagree = filter_questions(folder, "disagree")
    assert (out / "answers").exists() == bool(disagree)
    for (q, m) in folder.traced:  # each cell of a question where methods disagree links to its own page: strip, inspector
        page = out / answer_page(m, q)
        if q not in disagree:
            assert not page.exists() and answer_page(m, q).replace("%", "%25") not in answers[f"{q}|{m}"]
            continue
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
    assert explorer.grid.count('class="el-cell') == 9
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

    _, explorer, opened = results.open_evaluation(OLD)
    assert "No traces kept" in explorer.grid and "No traces kept" in explorer.stats_view
    trace, note = results.open_cell(opened, {"qid": 23, "method": "single:qwen"})
    assert trace is None and "No traces kept for this run" in note and "candle" in note


def test_a_zip_without_an_evaluation_folder_is_refused(tmp_path):
    from ui import results

    archive = tmp_path / "x.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("notes.txt", "hello")
    summary, _, opened = results.open_evaluation(archive)
    assert opened is None and "holds no evaluation folder" in summary.results_view
    (tmp_path / "bad.zip").write_bytes(b"not a zip")
    assert "not a readable .zip" in results.open_evaluation(tmp_path / "bad.zip")[0].results_view


def test_results_look_the_scatter_has_no_overlapping_labels_and_the_table_scrolls_in_its_box():
    from ensemble.evaluation import load_summary

    rows = load_summary(OLD)
    scatter, _ = visual.results_figures(rows)
    assert all(t.mode == "markers" for t in scatter.data)  # names in the legend, not beside points that overlap
    assert visual.results_html(rows).startswith('<div class="el-table-scroll"')


def test_blocked_strings_are_sorted_into_kinds():
    assert [string_kind(s) for s in (" 48", "1,000", "3.5", " Sofia", "Pl", " x_1", "(", "**", " the", "  ")] == [
        "number", "number", "number", "name", "name", "code", "code", "code", "other", "space"]


def test_where_qwen_and_safe_part_and_what_decided_it(folder):
    """Hand-checked on the fixture: SAFE follows qwen's draft (consensus, or fused and kept) until its first
    replacement; there the answers part, and the replacement's numbers say why."""
    div = answers_divergence(folder, 0, ("single:qwen", "safe-unite"))
    qwen, safe = div.traces
    assert div.indices == (21, 21) and div.at == qwen.tokens[21].start == safe.tokens[21].start == 91
    assert qwen.text[:91] == safe.text[:91] and qwen.text[91] != safe.text[91]
    assert div.lines()[1:] == [
        "single:qwen: qwen alone wrote '.\\n' (token #21); nothing was ensembled there.",
        "safe-unite replaced qwen's '.\\n' with ' half' (token #21): qwen 0.49, smollm2 0.06, weighted mean 0.34; "
        "fused probability 0.45.",
    ]
    assert safe.tokens[21].decision == Decision.ENSEMBLED_REPLACED and qwen.tokens[21].decision == Decision.DRAFTER
    html = divergence_html(div)
    assert html.count("el-fork-split") == 2  # the first difference, marked on both sides
    assert "fused their distributions" in html and "half" in html  # the inspector's explanation of token #21
    assert answers_divergence(folder, 2, ("single:qwen", "safe-unite")).lines()[2].startswith(
        "safe-unite replaced qwen's ' determine' with ' solve' (token #1): qwen 0.56, smollm2 0.00")
    parted = answers_divergence(folder, 1, ("safe-unite", "specem"))
    assert parted.lines()[2] == ("specem: '\\n' (token #22) is in smollm2's segment, which won round 2 "
                                 "(scores qwen 0.45, smollm2 0.55).")
    same = divergence(qwen, qwen, ("a", "b"))
    assert same.at is None and same.lines() == ["Both answers are the same text."]
    with pytest.raises(EvaluationError, match="two different methods"):
        answers_divergence(folder, 0, ("specem", "specem"))
    with pytest.raises(EvaluationError, match="not a method of this evaluation"):
        answers_divergence(folder, 0, ("specem", "unite"))


def test_decision_statistics_against_hand_counts(folder):
    stats = decision_stats(folder)
    # decisions: counted by hand in the nine traces (64 tokens each)
    assert stats["decisions"]["safe-unite"]["counts"] == {"consensus": 49 + 58 + 57, "ensembled_kept": 10 + 1 + 4,
                                                          "ensembled_replaced": 5 + 5 + 3}
    assert stats["decisions"]["safe-unite"]["per_100"] == {"consensus": 85.42, "ensembled_kept": 7.81, "ensembled_replaced": 6.77}
    assert stats["decisions"]["single:qwen"]["counts"] == {"drafter": 192}
    assert stats["decisions"]["specem"]["counts"] == {"segment": 192}
    # qwen and smollm2 share every draft boundary of these answers: 192 checked, none blocked
    assert stats["blocked"] == [{"method": "safe-unite", "drafter": "qwen", "verifier": "smollm2", "checked": 192,
                                 "blocked": 0, "share": 0.0, "top": [], "kinds": {}}]
    # the drafter alone (qwen) is wrong on all three (64 tokens end every answer early); SAFE replaced and is wrong too
    assert stats["replacements"] == {"safe-unite": {"drafter": "single:qwen",
                                                    "counts": {"drafter wrong, replaced, ensemble wrong": 3},
                                                    "questions": {"drafter wrong, replaced, ensemble wrong": [0, 1, 2]}}}
    assert [(p["qid"], p["position"], p["replacements"], p["correct"]) for p in stats["first_replacement"]["safe-unite"]] == [
        (0, 21, 5, False), (1, 22, 5, False), (2, 1, 3, False)]
    segments = stats["segments"]["specem"]
    assert segments["wins"] == {"qwen": 7 + 3 + 5, "smollm2": 1 + 4 + 2}  # rounds won, question by question
    assert [len(t["weights"]["qwen"]) for t in segments["trajectories"]] == [9, 8, 8]  # the start, then each round
    figures = visual_stats_figures(stats)
    assert [f.layout.title.text for f in figures] == ["Decisions per 100 generated tokens",
                                                      "Token position of the first replacement, by correctness",
                                                      "SpecEM weights over rounds, every question"]
    assert len(figures[2].data) == 3 * 2  # every question's trajectory, per model


def test_blocked_strings_per_pair_on_the_sofia_trace(tmp_path):
    """The recorded SAFE run on "Sofia went to Plovdiv" (smollm2 drafts; gemma3 and qwen verify): by hand, gemma3
    blocked 'of', 'ia' and 'ov' and qwen 'ov', of 16 checked boundaries each."""
    from ensemble.evaluation.traces import save_trace
    from ensemble.trace import RunTrace

    trace = RunTrace.from_json((ROOT / "tests" / "fixtures" / "safe.json").read_bytes())
    out = tmp_path / "sofia"
    out.mkdir()
    (out / "meta.json").write_text(json.dumps({"methods": ["safe-unite"], "question_ids": [5]}))
    row = {"qid": 5, "method": "safe-unite", "prediction": None, "gold": "1999", "correct": False, "tokens": 16,
           "et_ratio": 0.0, "latency_s": 1.0, "tokens_per_s": 1.0, "stop_reason": "budget", "corrupted": False,
           "error": None, "question": "Sofia?", "text": trace.text}
    (out / "rows.jsonl").write_text(json.dumps(row) + "\n")
    save_trace(out, 5, "safe-unite", trace)
    blocked = {(e["drafter"], e["verifier"]): e for e in decision_stats(open_folder(out))["blocked"]}
    assert set(blocked) == {("smollm2", "gemma3"), ("smollm2", "qwen")}
    gemma, qwen = blocked[("smollm2", "gemma3")], blocked[("smollm2", "qwen")]
    assert (gemma["checked"], gemma["blocked"], gemma["share"]) == (16, 3, 0.1875)
    assert (qwen["checked"], qwen["blocked"], qwen["share"]) == (16, 1, 0.0625)
    assert [(t["text"], t["count"], t["questions"]) for t in gemma["top"]] == [("of", 1, [5]), ("ia", 1, [5]), ("ov", 1, [5])]
    assert [t["text"] for t in qwen["top"]] == ["ov"]
    assert "of" in visual_blocked_table({"blocked": list(blocked.values())})
