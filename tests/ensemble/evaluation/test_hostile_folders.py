"""An evaluation folder from anyone (issue 39, items 7, 9 and 11): read in work linear in its size, with its
statistics bounded, its damaged parts counted as missing, only regular files read and no file written through a
symbolic link; every refusal one sentence naming the file, never the path it lies at."""

from __future__ import annotations

import os
import shutil
import threading

import pytest

from ensemble.errors import EnsembleError, EvaluationError, OutputError
from ensemble.evaluation.decision_stats import decision_stats
from ensemble.evaluation.explorer import open_folder
from tests.conftest import ROOT
from visual.evalstats import stats_html

FIXTURE = ROOT / "tests" / "fixtures" / "evaluation" / "gsm8k-3"


@pytest.fixture
def copy(tmp_path):
    target = tmp_path / "gsm8k-3"
    shutil.copytree(FIXTURE, target)
    return target


def _in_time(fn, seconds: float = 10):
    """``fn()``'s result or exception, or a failure when it does not return in ``seconds`` (a read that waits)."""
    out = {}

    def run():
        try:
            out["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed back to the test
            out["error"] = exc

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(seconds)
    assert not worker.is_alive(), f"no answer in {seconds} s"
    return out


class CountingRows(list):
    iterations = 0

    def __iter__(self):
        type(self).iterations += 1
        return super().__iter__()


def test_question_texts_are_indexed_once_not_scanned_per_grid_row(copy):
    folder = open_folder(copy)
    folder.rows = CountingRows(folder.rows)
    CountingRows.iterations = 0
    texts = [folder.question(q) for q in folder.question_ids * 20]
    assert all(texts) and CountingRows.iterations <= 1  # one pass for 60 look-ups (it was one pass each)


def test_decision_statistics_stop_at_their_budget_and_say_what_they_counted(copy, monkeypatch):
    folder = open_folder(copy)
    full = decision_stats(folder)
    assert full["counted"] == {"read": 9, "of": 9, "complete": True, "tokens": full["counted"]["tokens"]}
    assert "reading stopped" not in stats_html(full)
    loads = []
    monkeypatch.setattr(type(folder), "readable_trace", lambda self, q, m: loads.append((q, m)) or folder.trace(q, m))
    part = decision_stats(folder, max_tokens=1)
    assert len(loads) == 1 and part["counted"]["read"] == 1 and not part["counted"]["complete"]
    assert sum(d["answers"] for d in part["decisions"].values()) == 1
    assert "count 1 of the 9 traced answers" in stats_html(part)
    loads.clear()
    assert decision_stats(folder, budget_s=-1)["counted"]["read"] == 0 and not loads


def test_meta_json_linked_to_a_device_is_refused_not_read(copy):
    """/dev/null, not /dev/zero: on a reader without the check, /dev/zero would fill the memory of the test run."""
    (copy / "meta.json").unlink()
    os.symlink("/dev/null", copy / "meta.json")
    out = _in_time(lambda: open_folder(copy))
    assert isinstance(out.get("error"), EvaluationError) and "meta.json is not a regular file" in str(out["error"])
    assert str(copy) not in str(out["error"])


def test_meta_json_and_rows_jsonl_are_read_within_their_size_limits(copy, monkeypatch):
    from ensemble.evaluation import store

    monkeypatch.setattr(store, "MAX_META_BYTES", 100)
    with pytest.raises(EvaluationError, match=r"meta\.json is larger than"):
        open_folder(copy)
    monkeypatch.setattr(store, "MAX_META_BYTES", 10**6)
    monkeypatch.setattr(store, "MAX_ROWS_BYTES", 100)
    with pytest.raises(EvaluationError, match=r"rows\.jsonl is larger than"):
        open_folder(copy)


def test_a_pipe_for_rows_jsonl_is_refused_and_the_cli_does_not_hang(copy, capsys):
    from ensemble.cli.parser import main as cli_main

    (copy / "rows.jsonl").unlink()
    os.mkfifo(copy / "rows.jsonl")
    out = _in_time(lambda: open_folder(copy))
    assert isinstance(out.get("error"), EvaluationError) and "rows.jsonl is not a regular file" in str(out["error"])
    for command in (["explain", str(copy), "--qid", "0", "--methods", "single:qwen,specem"], ["report", str(copy)]):
        code = _in_time(lambda c=command: cli_main(c)).get("value")
        err = capsys.readouterr().err
        assert code not in (0, None) and "rows.jsonl is not a regular file" in err and "Traceback" not in err


@pytest.mark.parametrize("where", ["meta.json", "rows.jsonl"])
def test_deeply_nested_json_is_one_sentence_not_a_recursion_error(copy, where):
    path = copy / where
    if where == "meta.json":
        path.write_text("[" * 100_000)
    else:
        path.write_text("[" * 100_000 + "\n" + path.read_text())  # a broken line before good ones
    with pytest.raises(EvaluationError) as caught:
        open_folder(copy)
    assert where in str(caught.value) and str(copy) not in str(caught.value)
    if where == "rows.jsonl":  # as the last line (a cut run), it is ignored like any broken last line
        path.write_text((FIXTURE / "rows.jsonl").read_text() + "[" * 100_000)
        assert len(open_folder(copy).rows) == 9


def test_a_trace_with_a_damaged_deflate_stream_counts_as_missing(copy):
    path = copy / "traces" / "specem" / "1.json.gz"
    data = bytearray(path.read_bytes())
    data[20:60] = bytes(40)  # zeros in the deflate stream: zlib.error on reading
    path.write_bytes(bytes(data))
    with pytest.raises(EvaluationError, match="not a readable gzip"):
        open_folder(copy).trace(1, "specem")
    folder = open_folder(copy)
    assert folder.readable_trace(1, "specem") is None
    assert decision_stats(folder)["decisions"]["specem"]["answers"] == 2


def test_report_never_writes_answer_pages_through_a_symlink(copy, tmp_path):
    from ensemble.cli.report import write_html_report
    from ensemble.evaluation import rebuild_report

    outside = tmp_path / "outside"
    outside.mkdir()
    os.symlink(outside, copy / "answers")
    with pytest.raises(OutputError, match="symbolic link"):
        rebuild_report(copy, write_html=lambda out, summary, meta: write_html_report(out, summary, meta, "all"))
    assert not list(outside.rglob("*"))


def test_report_replaces_a_linked_page_file_instead_of_writing_through_it(copy, tmp_path):
    from ensemble.cli.report import write_html_report
    from ensemble.evaluation import rebuild_report
    from visual.evalreport import answer_page

    target = tmp_path / "victim.txt"
    target.write_text("keep me")
    page = copy / answer_page("specem", 0)
    page.parent.mkdir(parents=True)
    os.symlink(target, page)
    rebuild_report(copy, write_html=lambda out, summary, meta: write_html_report(out, summary, meta, "all"))
    assert target.read_text() == "keep me" and not page.is_symlink() and "<html" in page.read_text().lower()


def test_no_message_of_a_damaged_folder_holds_its_path(copy):
    (copy / "meta.json").write_text('{"methods": 3}')
    with pytest.raises(EnsembleError) as caught:
        open_folder(copy)
    assert str(copy) not in str(caught.value) and "meta.json" in str(caught.value)
