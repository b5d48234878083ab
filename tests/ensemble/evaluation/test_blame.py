"""Counterfactual attribution (issue 38) on the evaluation fixture (tests/fixtures/evaluation/gsm8k-3): the decisions
that changed the drafter's token, the search for the decisive one (a scripted fork, then real forks on the tiny
models), the folder's record and table, and the command line."""

from __future__ import annotations

import json
import shutil

import pytest

from ensemble.cli.parser import main as cli_main
from ensemble.errors import EvaluationError
from ensemble.evaluation.blame import blame_answer, counterfactual, decisions
from ensemble.evaluation.blame_store import blame_table, load_fork, read_blame, record, run_batch
from ensemble.evaluation.explorer import open_folder
from ensemble.fork import complete_fork, fork_request
from tests.conftest import ROOT

FIXTURE = ROOT / "tests" / "fixtures" / "evaluation" / "gsm8k-3"


@pytest.fixture()
def lost(tmp_path):
    """The fixture with qwen alone made right on question 0 (gold 71): safe-unite lost it."""
    target = tmp_path / "gsm8k-3"
    shutil.copytree(FIXTURE, target)
    lines = []
    for line in (target / "rows.jsonl").read_text().splitlines():
        row = json.loads(line)
        if row["qid"] == 0 and row["method"] == "single:qwen":
            row.update(prediction="71", correct=True)
        lines.append(json.dumps(row))
    (target / "rows.jsonl").write_text("\n".join(lines) + "\n")
    return target


def scripted(flip_at: int, answer: str = "71"):
    """A fork that ends every continuation with 'The answer is 3.', but 'The answer is 71.' when forked at ``flip_at``;
    it records each fork it was asked for."""
    asked = []

    def fork(trace, at, force):
        asked.append((at, force))
        chars = trace.tokens[at].start
        forked = trace.__class__.from_dict(trace.to_dict())
        forked.text = trace.text[:chars] + force + f" The answer is {answer if at == flip_at else '3'}."
        last = forked.tokens[at]  # a fork's tokens are its own, from the kept text on: here one token
        forked.tokens = [last]
        last.index, last.text, last.start, last.end, last.decision = 0, forked.text[chars:], chars, len(forked.text), "drafter"
        last.details, last.fusion, last.round, last.condition, last.topk = {}, None, None, None, None
        forked.stats.generated_tokens, forked.rounds = len(forked.tokens), []
        forked.fork = {"at": at, "chars": chars, "force": force, "method": trace.method, "models": list(trace.models)}
        return forked

    fork.asked = asked
    return fork


def test_decisions_name_every_change_of_the_drafters_token_with_its_kind_and_member():
    folder = open_folder(FIXTURE)
    found = [(c.index, c.kind, c.draft, c.chosen, c.carried_by) for c in decisions(folder.trace(0, "safe-unite"))]
    assert found == [(21, "outvote", ".\n", " half", "smollm2"), (44, "sharpening", " to", ".", "smollm2"),
                     (47, "sharpening", " to", ".", "smollm2"), (48, "outvote", " This", "\n", "smollm2"),
                     (61, "outvote", " these", " the", "smollm2")]
    segments = [(c.index, c.kind, c.draft, c.carried_by) for c in decisions(folder.trace(2, "specem"))]
    assert segments == [(9, "segment", " we need to follow these steps:\n\n1.", "smollm2"),
                        (27, "segment", " of people he arm wrestled.\n\n1. **", "smollm2")]
    assert decisions(folder.trace(0, "single:qwen")) == []


def test_the_earliest_decision_whose_reversal_flips_the_outcome_is_decisive(lost):
    folder = open_folder(lost)
    fork = scripted(flip_at=44)
    blame = blame_answer(folder, 0, fork, "safe-unite")
    assert (blame.method, blame.reference, blame.outcome, blame.status) == ("safe-unite", "single:qwen", "lost", "decisive")
    assert fork.asked == [(21, ".\n"), (44, " to")]  # earliest first, stopped at the first flip
    assert blame.decisive == 44 and blame.not_decisive() == [21] and blame.untried() == [47, 48, 61]
    decisive = blame.decisive_entry()
    assert (decisive["kind"], decisive["prediction"], decisive["correct"], decisive["carried_by"]) == ("sharpening", "71", True, "smollm2")
    assert blame.cost["forks"] == 2 and "token #44, a sharpening swap of the drafter's ' to'" in blame.summary()
    comparison = counterfactual(folder.trace(0, "safe-unite"), decisive)
    assert comparison["forked"] == " to The answer is 71." and comparison["kept"].endswith("from her initial $21")


def test_a_budget_or_no_flip_is_said_not_guessed(lost):
    folder = open_folder(lost)
    blame = blame_answer(folder, 0, scripted(flip_at=61), "safe-unite", max_forks=2)
    assert blame.status == "budget" and blame.decisive is None and blame.untried() == [47, 48, 61]
    assert "none of the first 2 decisions is decisive; 3 more were not tried (--max-forks 2)" in blame.summary()
    blame = blame_answer(folder, 0, scripted(flip_at=-1), "safe-unite")
    assert blame.status == "none" and len(blame.tried) == 5 and "no single decision is decisive" in blame.summary()
    with pytest.raises(EvaluationError, match="both wrong"):
        blame_answer(folder, 1, scripted(flip_at=-1), "safe-unite")


def test_the_batch_records_into_the_folder_and_resumes(lost):
    folder = open_folder(lost)
    fork = scripted(flip_at=44)
    lines = []
    made = run_batch(folder, ["safe-unite", "specem"], None, fork, say=lines.append)
    assert [(b.qid, b.method, b.decisive) for b in made] == [(0, "safe-unite", 44), (0, "specem", None)]
    saved = read_blame(lost)
    assert saved[(0, "safe-unite", "single:qwen")].decisive == 44
    assert load_fork(lost, 0, "safe-unite", 44).text.endswith("The answer is 71.")
    again = run_batch(open_folder(lost), ["safe-unite"], None, scripted(flip_at=44), say=lines.append)
    assert again == [] and any("already attributed" in line for line in lines)
    table = {(r["method"], r["outcome"]): r for r in blame_table(folder)}
    row = table[("safe-unite", "lost")]
    assert (row["searched"], row["decisive"], row["kinds"], row["members"], row["positions"]) == (
        1, 1, {"sharpening swap": 1}, {"smollm2": 1}, [44])


def test_real_forks_revert_with_the_drafters_key_and_the_method_going_on(lost, tiny):
    """The engine's own forks (tiny models in place of the run's): the forced key is the fork's first token and the
    ensemble wrote the rest; the record keeps what the fork view needs."""
    members = [tiny["qwen"], tiny["smollm2"]]

    def fork(trace, at, force):
        return complete_fork(fork_request(trace, at, trace.method, force, check=False, max_new_tokens=4), members, trace)[0]

    folder = open_folder(lost)
    forks = []
    blame = blame_answer(folder, 0, fork, "safe-unite", max_forks=1, keep=lambda i, t: forks.append(t))
    entry = blame.tried[0]
    assert entry["index"] == 21 and entry["continuation"].startswith(".\n") and entry["tokens"] >= 1
    assert entry["kept_chars"] == folder.trace(0, "safe-unite").tokens[21].start
    record(lost, blame)
    assert read_blame(lost)[(0, "safe-unite", "single:qwen")].tried[0]["continuation"] == entry["continuation"]

    from ensemble.evaluation.blame_members import pool_runner
    from ensemble.settings import Settings

    class Pool:  # the tiny models under the run's names
        def get_many(self, names):
            return [{"qwen": tiny["qwen"], "smollm2": tiny["smollm2"]}[n] for n in names]

    text = pool_runner(Pool())("safe", ["qwen", "smollm2"], Settings(max_new_tokens=3, drafter="tiny-qwen"), "2+2?")
    assert isinstance(text, str) and text


def test_the_command_says_plainly_when_there_is_nothing_to_attribute(capsys):
    assert cli_main(["blame", str(FIXTURE), "--qid", "1", "--method", "safe-unite"]) == 2
    err = capsys.readouterr().err
    assert "both wrong: there is no change of outcome to attribute" in err and "Traceback" not in err
    assert cli_main(["blame", str(FIXTURE), "--qid", "7"]) == 2
    assert "Question 7 is not in this evaluation" in capsys.readouterr().err


def test_member_attribution_runs_each_member_alone_and_reads_what_the_evaluation_holds(lost):
    from ensemble.evaluation.blame_members import member_attribution, plans

    asked = []

    def run(method, members, settings, prompt):
        asked.append((method, members, settings.drafter, settings.max_new_tokens))
        return "The answer is 71." if members == ["smollm2"] else "The answer is 5."

    found = member_attribution(open_folder(lost), 0, "safe-unite", run)
    assert asked == [("single", ["smollm2"], None, 64)]  # qwen alone is the evaluation's own row
    assert [(e["label"], e["prediction"], e["correct"], e["flips"]) for e in found] == [
        ("qwen alone (= without smollm2)", "71", True, True), ("smollm2 alone (= without qwen)", "71", True, True)]
    assert plans(["qwen", "smollm2", "gemma3"], "safe")[3:] == [
        ("without qwen", "safe", ["smollm2", "gemma3"]), ("without smollm2", "safe", ["qwen", "gemma3"]),
        ("without gemma3", "safe", ["qwen", "smollm2"])]


def test_report_html_holds_the_attribution_table(lost):
    from ensemble.cli.report import write_html_report
    from ensemble.evaluation import rebuild_report

    run_batch(open_folder(lost), ["safe-unite"], None, scripted(flip_at=44), say=lambda line: None)
    rebuild_report(lost, write_html=write_html_report)
    html = (lost / "report.html").read_text()
    assert "<h2>Which decision changed the answer</h2>" in html and "sharpening swap 1" in html


def test_a_larger_budget_continues_a_recorded_search_without_redoing_its_forks(lost):
    first = scripted(flip_at=47)
    run_batch(open_folder(lost), ["safe-unite"], None, first, max_forks=1, say=lambda line: None)
    assert read_blame(lost)[(0, "safe-unite", "single:qwen")].status == "budget" and first.asked == [(21, ".\n")]
    more = scripted(flip_at=47)
    run_batch(open_folder(lost), ["safe-unite"], None, more, max_forks=3, say=lambda line: None)
    blame = read_blame(lost)[(0, "safe-unite", "single:qwen")]
    assert more.asked == [(44, " to"), (47, " to")]  # #21 was not forked again
    assert blame.decisive == 47 and blame.not_decisive() == [21, 44] and blame.cost["forks"] == 3


def test_the_command_line_runs_one_answer_and_the_batch_with_every_flag(lost, capsys, monkeypatch):
    """``blame`` end to end on the command line, its forks scripted (no models): one answer searched, printed and
    saved, its members asked for; then the batch, which finds the saved answer already attributed."""
    import ensemble.cli.blame as blame_cli
    import ensemble.evaluation.blame as blame_module
    import ensemble.evaluation.blame_members as members_module

    monkeypatch.setattr(blame_cli, "_pool", lambda args, folder: None)
    monkeypatch.setattr(blame_module, "model_forks", lambda pool: scripted(flip_at=44))
    monkeypatch.setattr(members_module, "member_attribution", lambda folder, qid, method, pool, say: [
        {"label": "qwen alone", "prediction": "71", "correct": True}])
    argv = ["blame", str(lost), "--method", "safe-unite", "--reference", "single:qwen", "--max-forks", "8"]
    assert cli_main([*argv, "--qid", "0", "--save", "--members"]) == 0
    out = capsys.readouterr().out
    assert "#  44" in out and "DECISIVE" in out and "qwen alone: answers 71 (right)" in out
    assert read_blame(lost)[(0, "safe-unite", "single:qwen")].decisive == 44
    assert cli_main([*argv, "--all", "--first", "2,0", "--json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out) == [] and "already attributed" in captured.err
    assert cli_main([*argv[:2], "--all", "--max-forks", "0"]) == 2
    assert "--max-forks must be at least 1" in capsys.readouterr().err
