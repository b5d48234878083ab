"""The evaluate command: question selection, resume, summary arithmetic, outputs, CLI errors."""

from __future__ import annotations

import csv
import importlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

import visual
from ensemble import methods as engine
from ensemble.cli.report import write_html_report
from ensemble.errors import InputError
from ensemble.evaluation import (
    INSTRUCTION,
    SUMMARY_FIELDS,
    EvalConfig,
    EvaluationError,
    build_prompt,
    is_corrupted,
    is_looping,
    load_questions,
    load_summary,
    parse_methods,
    read_rows,
    rebuild_report,
    run_evaluation,
    segment_summary,
    select_questions,
    summarize,
    wilson_interval,
)
from ensemble.evaluation.answers import extract_answer, same_number
from ensemble.settings import Settings
from ensemble.trace import RunStats, RunTrace, TokenRecord
from tests.conftest import ROOT


def write_data(path: Path, pairs: list[tuple[int, int]], blank_at: int | None = None) -> Path:
    """GSM8K-format lines "What is a plus b?" with "#### a+b"; optionally a blank line at an index."""
    lines = [json.dumps({"question": f"What is {a} plus {b}?", "answer": f"{a} + {b} = {a + b}\n#### {a + b}"}) for a, b in pairs]
    if blank_at is not None:
        lines.insert(blank_at, "")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


class FakeEngine:
    """Stands in for ``methods.generate``: single answers right, ensembles answer one too many."""

    def __init__(self, fail_on: set[tuple[int, str]] | None = None, interrupt_after: int | None = None):
        self.calls: list[tuple[str, str]] = []
        self.fail_on = fail_on or set()
        self.interrupt_after = interrupt_after

    def __call__(self, models, prompt, method="single", settings=None, **kwargs):
        if self.interrupt_after is not None and len(self.calls) >= self.interrupt_after:
            raise KeyboardInterrupt
        self.calls.append((prompt, method))
        a, b = map(int, re.findall(r"\d+", prompt.split("\n")[0])[:2])
        if (a, method) in self.fail_on:
            raise InputError("The prompt is too strange.")
        answer = a + b if method == "single" else a + b + 1
        text = f"{a} + {b} = {answer}.\nThe answer is {answer}."
        return RunTrace(
            method=method,
            models=[m.name for m in models],
            settings=settings.to_dict(),
            prompt=prompt,
            text=text,
            tokens=[TokenRecord(0, text, 0, len(text), models[0].name, "drafter")],  # one token: a valid trace to keep
            stats=RunStats(generated_tokens=10, et_ratio=0.5 if method != "single" else 0.0, latency_s=2.0,
                           tokens_per_s=5.0, stop_reason="eos"),
        )


def fake_models(*names):
    return {n: SimpleNamespace(name=n, info={"architecture": "Fake", "parameters": 1, "dtype": "float32", "vocab": 100},
                               source="test") for n in names}


@pytest.fixture
def fake(monkeypatch):
    engine_fake = FakeEngine()
    monkeypatch.setattr(engine, "generate", engine_fake)
    return engine_fake


def config_for(tmp_path, data, methods="single:a,unite", models=("a", "b"), limit=None, **settings):
    return EvalConfig(data=data, methods=parse_methods(methods), models=list(models),
                      settings=Settings(max_new_tokens=8, **settings), out=tmp_path / "out", limit=limit)


def jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").split("\n") if line.strip()]


# -- parsing and selection ------------------------------------------------------------------------------------
def test_parse_methods_specs_and_errors():
    specs = parse_methods("single:qwen, unite,gac,safe-unite,safe-gac,specem")
    assert [s.label for s in specs] == ["single:qwen", "unite", "gac", "safe-unite", "safe-gac", "specem"]
    assert [s.method for s in specs] == ["single", "unite", "gac", "safe", "safe", "specem"]
    assert specs[0].model == "qwen" and specs[0].model_names(["x", "y"]) == ["qwen"]
    assert specs[3].fusion == "unite" and specs[4].fusion == "gac"
    assert specs[4].settings(Settings(fusion="unite")).fusion == "gac"
    single = specs[0].settings(Settings(drafter="y", weights={"y": 2.0}))
    assert single.drafter is None and single.weights == {}
    with pytest.raises(EvaluationError, match=r"Unknown method 'best'.*single:NAME"):
        parse_methods("unite,best")
    with pytest.raises(EvaluationError, match="twice"):
        parse_methods("unite,unite")
    with pytest.raises(EvaluationError, match="needs a model name"):
        parse_methods("single:")
    with pytest.raises(EvaluationError, match="empty"):
        parse_methods(" , ")


def test_question_ids_are_line_indices_and_subsets_are_deterministic(tmp_path):
    data = write_data(tmp_path / "q.jsonl", [(i, i + 1) for i in range(40)], blank_at=5)
    questions = load_questions(data)
    assert len(questions) == 40
    assert [q.qid for q in questions[4:7]] == [4, 6, 7]  # line 5 (index 5) is blank
    assert questions[5].question == "What is 5 plus 6?" and questions[5].gold == "11"
    first = select_questions(questions, 10, seed=3)
    assert first == select_questions(questions, 10, seed=3)
    assert [q.qid for q in first] == sorted(q.qid for q in first)
    assert {q.qid for q in first} < {q.qid for q in select_questions(questions, 20, seed=3)}
    assert first != select_questions(questions, 10, seed=4)
    assert select_questions(questions, None, 0) == questions
    assert select_questions(questions, 100, 0) == questions


def test_line_separators_inside_strings_do_not_split_lines(tmp_path):
    data = tmp_path / "q.jsonl"
    data.write_text('{"question": "Line\u2028sep and\x85 NEL: 1 plus 2?", "answer": "#### 3"}\r\n'
                    '{"question": "2 plus 2?", "answer": "#### 4"}\n', encoding="utf-8")
    questions = load_questions(data)
    assert [(q.qid, q.gold) for q in questions] == [(0, "3"), (1, "4")]
    assert "\u2028" in questions[0].question


def test_bad_data_files_are_explained(tmp_path):
    with pytest.raises(EvaluationError, match="does not exist"):
        load_questions(tmp_path / "missing.jsonl")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "q", "answer": "#### 1"}\n{"question": "q2", "answer": \n', encoding="utf-8")
    with pytest.raises(EvaluationError, match="line 2 is not valid JSON"):
        load_questions(bad)
    bad.write_text('{"question": "q", "answer": "no number"}\n', encoding="utf-8")
    with pytest.raises(EvaluationError, match=r"line 1.*####"):
        load_questions(bad)
    bad.write_text('{"answer": "#### 1"}\n', encoding="utf-8")
    with pytest.raises(EvaluationError, match="question"):
        load_questions(bad)


def test_prompt_carries_the_instruction():
    assert build_prompt("  How many?  ") == f"How many?\n{INSTRUCTION}"
    assert "The answer is" in INSTRUCTION


# Real outputs from the GSM8K run in docs/results.md (question 76): SAFE-UniTE's answer fell into a loop that
# the character-level corruption flag cannot see; qwen's own answer repeats phrases, but never 4 times.
SAFE_LOOP = """To solve this problem, we need to determine the number of bags of dog food Cecilia will use in the first year.
1. First, we need to calculate the number of bags of dog food Cecilia will use in the first year.
2. The first year is 180 days.
3. The number of bags of dog food Cecilia will use in the first year is 110 cups.
4. The number of bags of dog food Cecilia will use in the first year is 110 cups.
5. The number of bags of dog food Cecilia will use in the first year is 110 cups."""
QWEN_STEPS = """To determine how many bags of dog food Cecilia will use in the first year, we need to follow these steps:

1. Calculate the total number of days in the first year.
2. Determine how many days the puppy has been fed in the first year.
3. Calculate the number of bags of dog food needed based on the number of days fed.

First, we know that there are 365 days in a year. Therefore, the total number of days in the first year is:
\\[ 365 \\]

Next, we know that the puppy has been fed for 180 days. Therefore, the number of days the puppy has been fed in the first year is:
\\[ 180 \\]"""


def test_phrase_loop_flag_on_real_outputs():
    assert is_looping(SAFE_LOOP) and not is_corrupted(SAFE_LOOP)
    assert not is_looping(QWEN_STEPS)
    assert not is_looping(SAFE_LOOP.rsplit("\n", 2)[0])  # two numbered repeats plus the header lines: 3 times
    assert is_looping("a b c d e f g h " * 4) and not is_looping("a b c d e f g h " * 3 + "a b c d e f g")
    assert not is_looping("")


def test_corruption_flag():
    assert is_corrupted("ok \ufffd ok")
    assert is_corrupted("The answer is!!!!!!!!")
    assert is_corrupted("========")
    assert not is_corrupted("=======")  # 7 in a row is fine
    assert not is_corrupted("The answer is 18." + " " * 20)
    assert not is_corrupted("a!a!a!a!a!a!a!a!a!")


# -- summary arithmetic -----------------------------------------------------------------------------------------
def test_wilson_interval_hand_computed():
    # 7/10, z^2 = 3.841459: denom 1 + 0.384146 = 1.384146; center (0.7 + 0.192073) / 1.384146 = 0.644493;
    # half 1.959964 * sqrt(0.7 * 0.3 / 10 + 3.841459 / 400) / 1.384146 = 1.959964 * 0.174939 / 1.384146 = 0.247715
    low, high = wilson_interval(7, 10)
    assert low == pytest.approx(0.396778, abs=1e-5) and high == pytest.approx(0.892209, abs=1e-5)
    # 0/3: the upper bound is (z^2/3) / (1 + z^2/3) = 1.280486 / 2.280486 = 0.561497
    low, high = wilson_interval(0, 3)
    assert low == pytest.approx(0.0, abs=1e-12) and high == pytest.approx(0.561497, abs=1e-5)
    assert wilson_interval(5, 5)[1] == pytest.approx(1.0)
    assert wilson_interval(0, 0) == (0.0, 1.0)


def test_summary_arithmetic():
    def row(method, correct, tokens, latency, et, corrupted, stop="eos", **extra):
        return {"method": method, "correct": correct, "tokens": tokens, "latency_s": latency, "et_ratio": et,
                "corrupted": corrupted, "stop_reason": stop, **extra}

    rows = [
        row("safe-unite", True, 100, 10.0, 0.10, False, "budget", looping=True),
        row("single:qwen", True, 50, 1.0, 0.0, False, text=SAFE_LOOP),  # an older row: the flag comes from its text
        row("safe-unite", False, 60, 2.0, 0.05, True, "budget", looping=False, text=SAFE_LOOP),  # the row's flag wins
        row("safe-unite", True, 40, 4.0, 0.00, False, looping=False),
        row("single:qwen", False, 30, 3.0, 0.0, True, "budget", text=QWEN_STEPS),
    ]
    summary = summarize(rows, ["single:qwen", "safe-unite", "specem"])
    assert [s["method"] for s in summary] == ["single:qwen", "safe-unite"]  # specem has no rows
    single, safe = summary
    assert (safe["n"], safe["correct"]) == (3, 2)
    assert safe["accuracy"] == pytest.approx(2 / 3, abs=1e-6)
    assert safe["tokens_per_s"] == pytest.approx(200 / 16)  # total tokens / total latency, not a mean of rates
    assert safe["s_per_question"] == pytest.approx(16 / 3, abs=1e-4)
    assert safe["mean_et"] == pytest.approx(0.05)
    assert safe["corruption_rate"] == pytest.approx(1 / 3, abs=1e-6)
    assert safe["mean_tokens"] == pytest.approx(200 / 3, abs=1e-4)
    # Wilson 2/3 by hand: denom 1 + 3.841459 / 3 = 2.280486; center (0.666667 + 0.640243) / 2.280486 = 0.573084;
    # half 1.959964 * sqrt(0.222222 / 3 + 3.841459 / 36) / 2.280486 = 1.959964 * 0.425183 / 2.280486 = 0.365424
    assert safe["ci_low"] == pytest.approx(0.207660, abs=1e-5) and safe["ci_high"] == pytest.approx(0.938508, abs=1e-5)
    assert (single["n"], single["correct"], single["tokens_per_s"], single["corruption_rate"]) == (2, 1, 20.0, 0.5)
    assert (safe["loop_rate"], safe["budget_rate"]) == (pytest.approx(1 / 3, abs=1e-6), pytest.approx(2 / 3, abs=1e-6))
    assert (single["loop_rate"], single["budget_rate"]) == (0.5, 0.5)
    assert set(single) == set(SUMMARY_FIELDS)


def test_segment_summary_arithmetic():
    rows = [
        {"method": "specem", "segment_wins": {"a": 3, "b": 1}, "final_weights": {"a": 0.7, "b": 0.3}},
        {"method": "specem", "segment_wins": {"a": 0, "b": 2}, "final_weights": {"a": 0.4, "b": 0.6}},
        {"method": "unite", "segment_wins": None, "final_weights": None},
        {"method": "safe-unite"},  # an older row without the fields
    ]
    assert segment_summary(rows) == {"specem": {"questions": 2, "wins": {"a": 3, "b": 3}, "mean_final_weight": {"a": 0.55, "b": 0.45}}}
    assert segment_summary(rows[2:]) == {}


def test_load_summary_round_trip_and_errors(tmp_path, fake):
    data = write_data(tmp_path / "q.jsonl", [(1, 2), (3, 4)])
    summary = run_evaluation(config_for(tmp_path, data), fake_models("a", "b"), progress=False)
    loaded = load_summary(tmp_path / "out")
    assert loaded == summary
    assert loaded == load_summary(tmp_path / "out" / "summary.csv")
    assert isinstance(loaded[0]["n"], int) and isinstance(loaded[0]["accuracy"], float)

    with pytest.raises(EvaluationError, match="No evaluation summary"):
        load_summary(tmp_path / "nowhere")
    bad = tmp_path / "bad.csv"
    bad.write_text("method,n,correct\nunite,3,2\n", encoding="utf-8")
    with pytest.raises(EvaluationError, match=r"missing column.*accuracy"):
        load_summary(bad)
    header = ",".join(SUMMARY_FIELDS)
    bad.write_text(f"{header}\nunite,3,2,abc,0,1,0,1,1,0,5,0,0,0,0\n", encoding="utf-8")
    with pytest.raises(EvaluationError, match="line 2: accuracy must be a number"):
        load_summary(bad)
    bad.write_text(f"{header}\nunite,3,5,1,0,1,0,1,1,0,5,0,0,0,0\n", encoding="utf-8")
    with pytest.raises(EvaluationError, match=r"correct .5. is larger than n .3."):
        load_summary(bad)
    bad.write_text(f"{header}\nunite,3,2,1,0\n", encoding="utf-8")
    with pytest.raises(EvaluationError, match="line 2 has 5 fields"):
        load_summary(bad)
    # A summary written before the loop and budget columns existed still opens; those values are absent.
    old = [c for c in SUMMARY_FIELDS if c not in ("loop_rate", "budget_rate", "replaced_per_100", "discarded_per_100")]
    bad.write_text(",".join(old) + "\nunite,3,2,0.666667,0.2,0.9,1,3.5,20,0,200\n", encoding="utf-8")
    (row,) = load_summary(bad)
    assert row["correct"] == 2 and row["mean_tokens"] == 200.0 and "loop_rate" not in row
    assert re.search(r'<td class="el-num"[^>]*>–</td>', visual.results_html([row]))  # a cell may carry its label for phones
    bad.write_bytes(b"\xff\xfe\x00junk")
    with pytest.raises(EvaluationError, match="not UTF-8"):
        load_summary(bad)


# -- running and resuming (fake engine: the mechanics, not the models) -------------------------------------------------
def test_rows_outputs_and_meta(tmp_path, fake):
    data = write_data(tmp_path / "q.jsonl", [(1, 2), (3, 4), (5, 6)])
    summary = run_evaluation(config_for(tmp_path, data), fake_models("a", "b"), progress=False)
    out = tmp_path / "out"
    rows = jsonl(out / "rows.jsonl")
    assert [(r["qid"], r["method"]) for r in rows] == [(q, m) for q in range(3) for m in ("single:a", "unite")]
    assert fake.calls[0] == (f"What is 1 plus 2?\n{INSTRUCTION}", "single")
    assert all(r["correct"] == (r["method"] == "single:a") for r in rows)
    assert rows[0]["prediction"] == "3" and rows[0]["gold"] == "3" and rows[1]["prediction"] == "4"
    assert summary == [
        {"method": "single:a", "n": 3, "correct": 3, "accuracy": 1.0, "ci_low": pytest.approx(0.438503, abs=1e-5),
         "ci_high": 1.0, "mean_et": 0.0, "tokens_per_s": 5.0, "s_per_question": 2.0, "corruption_rate": 0.0, "mean_tokens": 10.0,
         "loop_rate": 0.0, "budget_rate": 0.0, "replaced_per_100": 0.0, "discarded_per_100": 0.0},
        {"method": "unite", "n": 3, "correct": 0, "accuracy": 0.0, "ci_low": 0.0, "ci_high": pytest.approx(0.561497, abs=1e-5),
         "mean_et": 0.5, "tokens_per_s": 5.0, "s_per_question": 2.0, "corruption_rate": 0.0, "mean_tokens": 10.0,
         "loop_rate": 0.0, "budget_rate": 0.0, "replaced_per_100": 0.0, "discarded_per_100": 0.0},
    ]
    with open(out / "rows.csv", encoding="utf-8", newline="") as fh:
        csv_rows = list(csv.DictReader(fh))
    assert [(int(r["qid"]), r["method"], r["text"]) for r in csv_rows] == [(r["qid"], r["method"], r["text"]) for r in rows]
    assert [json.loads(c["final_weights"]) if c["final_weights"] else None for c in csv_rows] == [r["final_weights"] for r in rows]
    meta = json.loads((out / "meta.json").read_text())
    assert meta["instruction"] == INSTRUCTION and meta["complete"] is True
    assert meta["settings"]["max_new_tokens"] == 8 and meta["models"] == ["a", "b"]
    assert meta["method_settings"]["unite"]["models"] == ["a", "b"] and meta["method_settings"]["single:a"]["models"] == ["a"]
    assert meta["question_ids"] == [0, 1, 2] and meta["seed"] == 0 and meta["limit"] is None
    assert {"platform", "cpu_count", "torch_threads"} <= set(meta["machine"])
    assert meta["runs"][0]["new_rows"] == 6 and meta["created"] == meta["started"]
    md = (out / "summary.md").read_text()
    assert "| single:a | 3 | 3 | 100.0% (43.9–100.0%)" in md and INSTRUCTION in md


def test_resume_skips_done_rows_and_ignores_a_truncated_last_line(tmp_path, fake):
    data = write_data(tmp_path / "q.jsonl", [(1, 2), (3, 4), (5, 6)])
    config = config_for(tmp_path, data)
    run_evaluation(config, fake_models("a", "b"), progress=False)
    rows_path = tmp_path / "out" / "rows.jsonl"
    rows = jsonl(rows_path)
    kept = [dict(r, text="KEPT " + r["text"]) for r in rows[:2]]  # marks rows that must not be redone
    partial = json.dumps(rows[2])[:40]  # the write of the third row was cut off
    rows_path.write_text("".join(json.dumps(r) + "\n" for r in kept) + partial, encoding="utf-8")
    fake.calls.clear()

    run_evaluation(config, fake_models("a", "b"), progress=False)
    assert len(fake.calls) == 4  # 6 pairs - 2 done
    text = rows_path.read_text(encoding="utf-8")
    assert text.endswith("}\n")
    again = [json.loads(line) for line in text[:-1].split("\n")]  # every line is valid JSON: the broken one was cut
    pairs = [(r["qid"], r["method"]) for r in again]
    assert len(pairs) == len(set(pairs)) == 6
    assert set(pairs) == {(q, m) for q in range(3) for m in ("single:a", "unite")}
    assert again[:2] == kept
    assert load_summary(tmp_path / "out")[0]["n"] == 3

    fake.calls.clear()
    run_evaluation(config, fake_models("a", "b"), progress=False)  # finished: nothing to redo
    assert fake.calls == []
    meta = json.loads((tmp_path / "out" / "meta.json").read_text())
    assert [r["new_rows"] for r in meta["runs"]] == [6, 4, 0]


def test_every_answer_keeps_its_trace_and_a_resumed_run_keeps_the_earlier_ones(tmp_path, fake):
    from ensemble.evaluation.traces import load_trace, trace_path, traced

    data = write_data(tmp_path / "q.jsonl", [(1, 2), (3, 4), (5, 6)])
    out = tmp_path / "out"
    run_evaluation(config_for(tmp_path, data, limit=2), fake_models("a", "b"), progress=False)
    rows = jsonl(out / "rows.jsonl")
    assert traced(out) == {(r["qid"], r["method"]) for r in rows} and len(rows) == 4
    for r in rows:  # saved and reloaded: the answer's own trace, text and method
        trace = load_trace(out, r["qid"], r["method"])
        assert trace.text == r["text"] and trace.method == ("single" if r["method"] == "single:a" else "unite")
    assert trace_path(out, 0, "single:a").name == "0.json.gz" and trace_path(out, 0, "single:a").parent.name == "single%3Aa"
    before = {p: p.read_bytes() for p in (out / "traces").rglob("*.json.gz")}
    fake.calls.clear()

    run_evaluation(config_for(tmp_path, data, limit=3), fake_models("a", "b"), progress=False)  # resumed, one more question
    assert len(fake.calls) == 2
    assert all(p.read_bytes() == b for p, b in before.items())  # the earlier traces are kept as they were
    assert traced(out) == {(q, m) for q in range(3) for m in ("single:a", "unite")}
    last = jsonl(out / "rows.jsonl")[-1]
    assert load_trace(out, last["qid"], last["method"]).text == last["text"]
    assert load_trace(out, 9, "unite") is None  # no such answer: no trace, no error


def test_a_damaged_trace_file_is_a_clear_error(tmp_path, fake):
    from ensemble.evaluation.traces import load_trace, trace_path

    run_evaluation(config_for(tmp_path, write_data(tmp_path / "q.jsonl", [(1, 2)])), fake_models("a", "b"), progress=False)
    path = trace_path(tmp_path / "out", 0, "unite")
    path.write_bytes(path.read_bytes()[:20])
    with pytest.raises(EvaluationError, match=r"question 0, unite .* not a readable gzip"):
        load_trace(tmp_path / "out", 0, "unite")


def test_read_rows_repairs_only_the_tail(tmp_path):
    path = tmp_path / "rows.jsonl"
    good = {k: None for k in ("prediction", "gold", "correct", "tokens", "et_ratio", "latency_s", "tokens_per_s",
                              "stop_reason", "corrupted", "error", "question", "text")}
    one, two = dict(good, qid=0, method="unite"), dict(good, qid=1, method="unite")
    path.write_text(json.dumps(one) + "\n" + json.dumps(two), encoding="utf-8")  # complete row, newline lost
    assert [r["qid"] for r in read_rows(path, repair=True)] == [0, 1]
    assert path.read_text().endswith("}\n")
    path.write_text(json.dumps(one) + "\n{broken\n" + json.dumps(two) + "\n", encoding="utf-8")
    with pytest.raises(EvaluationError, match="line 2 is not a valid result row"):
        read_rows(path)
    # Rows written before the loop flag existed are still valid; the flag is derived from their text.
    path.write_text(json.dumps(dict(one, text=SAFE_LOOP)) + "\n" + json.dumps(dict(two, text="ok")) + "\n", encoding="utf-8")
    assert [r["looping"] for r in read_rows(path)] == [True, False]


def test_resume_refuses_settings_that_would_mix_results(tmp_path, fake):
    data = write_data(tmp_path / "q.jsonl", [(1, 2), (3, 4), (5, 6)])
    run_evaluation(config_for(tmp_path, data, limit=2), fake_models("a", "b"), progress=False)
    with pytest.raises(EvaluationError, match="max_new_tokens was 8, now 16") as err:
        run_evaluation(EvalConfig(data=data, methods=parse_methods("single:a,unite"), models=["a", "b"],
                                  settings=Settings(max_new_tokens=16), out=tmp_path / "out", limit=2),
                       fake_models("a", "b"), progress=False)
    assert "new --out folder" in str(err.value)
    with pytest.raises(EvaluationError, match=r"models was \['a', 'b'\], now \['a', 'c'\]"):
        run_evaluation(config_for(tmp_path, data, models=("a", "c"), limit=2), fake_models("a", "c"), progress=False)
    with pytest.raises(EvaluationError, match="lookahead was 5, now 3"):
        run_evaluation(config_for(tmp_path, data, limit=2, lookahead=3), fake_models("a", "b"), progress=False)
    changed = fake_models("a", "b")
    changed["a"].info["dtype"] = "bfloat16"
    with pytest.raises(EvaluationError, match="model a: dtype was 'float32', now 'bfloat16'"):
        run_evaluation(config_for(tmp_path, data, limit=2), changed, progress=False)
    write_data(data, [(1, 2), (3, 4), (7, 8)])
    with pytest.raises(EvaluationError, match="--data file has different contents"):
        run_evaluation(config_for(tmp_path, data, limit=2), fake_models("a", "b"), progress=False)
    assert len(jsonl(tmp_path / "out" / "rows.jsonl")) == 4  # refused runs wrote nothing

    # More questions and another method are not a mix: only the new pairs run.
    write_data(data, [(1, 2), (3, 4), (5, 6)])
    fake.calls.clear()
    run_evaluation(config_for(tmp_path, data, methods="single:a,unite,safe-gac"), fake_models("a", "b"), progress=False)
    assert len(fake.calls) == 9 - 4
    assert [s["n"] for s in load_summary(tmp_path / "out")] == [3, 3, 3]


def test_rows_without_meta_are_refused(tmp_path, fake):
    data = write_data(tmp_path / "q.jsonl", [(1, 2)])
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "rows.jsonl").write_text('{"qid": 0}\n')
    with pytest.raises(EvaluationError, match=r"no meta.json"):
        run_evaluation(config_for(tmp_path, data), fake_models("a", "b"), progress=False)


def test_one_writer_per_folder(tmp_path, fake):
    import fcntl

    data = write_data(tmp_path / "q.jsonl", [(1, 2)])
    (tmp_path / "out").mkdir()
    with open(tmp_path / "out" / ".lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        with pytest.raises(EvaluationError, match="Another evaluation is writing"):
            run_evaluation(config_for(tmp_path, data), fake_models("a", "b"), progress=False)
    assert fake.calls == []
    run_evaluation(config_for(tmp_path, data), fake_models("a", "b"), progress=False)  # released: runs
    assert len(fake.calls) == 2


def test_a_failing_run_becomes_an_error_row(tmp_path, monkeypatch):
    fake = FakeEngine(fail_on={(3, "unite")})
    monkeypatch.setattr(engine, "generate", fake)
    data = write_data(tmp_path / "q.jsonl", [(1, 2), (3, 4)])
    run_evaluation(config_for(tmp_path, data), fake_models("a", "b"), progress=False)
    rows = jsonl(tmp_path / "out" / "rows.jsonl")
    bad = [r for r in rows if r["error"]]
    assert [(r["qid"], r["method"], r["stop_reason"], r["correct"]) for r in bad] == [(1, "unite", "error", False)]
    assert "too strange" in bad[0]["error"]
    assert len(rows) == 4


def test_an_interrupted_run_keeps_its_rows_and_resumes(tmp_path, monkeypatch):
    data = write_data(tmp_path / "q.jsonl", [(1, 2), (3, 4)])
    monkeypatch.setattr(engine, "generate", FakeEngine(interrupt_after=3))
    with pytest.raises(KeyboardInterrupt):
        run_evaluation(config_for(tmp_path, data), fake_models("a", "b"), progress=False)
    out = tmp_path / "out"
    assert len(jsonl(out / "rows.jsonl")) == 3
    assert json.loads((out / "meta.json").read_text())["complete"] is False
    # the partial summary is written too, on the one question both methods finished (a paired comparison)
    assert [s["n"] for s in load_summary(out)] == [1, 1]
    assert "the 1 of 2 questions that every method has finished" in (out / "summary.md").read_text()
    finish = FakeEngine()
    monkeypatch.setattr(engine, "generate", finish)
    run_evaluation(config_for(tmp_path, data), fake_models("a", "b"), progress=False)
    assert len(finish.calls) == 1 and len(jsonl(out / "rows.jsonl")) == 4


def test_a_stop_while_a_row_is_written_still_counts_that_row(tmp_path, monkeypatch, fake):
    """A Stop that lands inside the row's write (CI once sent it during the fsync) waits until the row is written
    and counted: meta's new_rows matches the file, and the run then stops before the next question."""
    import signal

    from ensemble.evaluation import runner
    from ensemble.members import interrupt_on_sigterm

    real_append = runner.append_row

    def append_then_killed(fh, row):
        real_append(fh, row)
        signal.raise_signal(signal.SIGTERM)  # arrives after the write, before the runner counts the row
        time.sleep(0.01)

    monkeypatch.setattr(runner, "append_row", append_then_killed)
    data = write_data(tmp_path / "q.jsonl", [(1, 2), (3, 4)])
    previous, previous_int = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    interrupt_on_sigterm()  # as the CLI's main does: SIGTERM stops a command like Ctrl-C
    ours = signal.getsignal(signal.SIGTERM)
    try:
        with pytest.raises(KeyboardInterrupt):
            run_evaluation(config_for(tmp_path, data), fake_models("a", "b"), progress=False)
        assert signal.getsignal(signal.SIGTERM) is ours  # the runner put the CLI's handler back
    finally:
        signal.signal(signal.SIGTERM, previous)
    out = tmp_path / "out"
    meta = json.loads((out / "meta.json").read_text())
    assert len(jsonl(out / "rows.jsonl")) == 1 == len(fake.calls)
    assert meta["complete"] is False and meta["runs"][-1]["new_rows"] == 1
    assert signal.getsignal(signal.SIGINT) is previous_int  # the runner put SIGINT's handler back (ignored in a background job)


def test_a_run_split_by_method_joins_back_into_one_report(tmp_path, monkeypatch):
    data = write_data(tmp_path / "q.jsonl", [(1, 2), (3, 4), (5, 6)])
    full = config_for(tmp_path, data, methods="single:a,single:b,unite")
    monkeypatch.setattr(engine, "generate", FakeEngine(interrupt_after=3))
    with pytest.raises(KeyboardInterrupt):  # the full command, stopped after question 0
        run_evaluation(full, fake_models("a", "b"), progress=False)
    out = tmp_path / "out"
    finish = FakeEngine()
    monkeypatch.setattr(engine, "generate", finish)
    parts = []
    for i, methods in enumerate(("single:a,unite", "single:b")):  # two processes, each on a copy of the folder
        part = tmp_path / f"part{i}"
        shutil.copytree(out, part)
        run_evaluation(EvalConfig(**{**vars(full), "methods": parse_methods(methods), "out": part}), fake_models("a", "b"),
                       progress=False)
        parts.append(part)
    assert len(finish.calls) == 4 + 2
    joined = b"".join((part / "rows.jsonl").read_bytes() for part in parts)  # both copies repeat the limit-1 rows
    (out / "rows.jsonl").write_bytes(joined)

    summary = rebuild_report(out, write_html=write_html_report)
    assert [(s["method"], s["n"], s["correct"]) for s in summary] == [("single:a", 3, 3), ("single:b", 3, 3), ("unite", 3, 0)]
    meta = json.loads((out / "meta.json").read_text())
    assert meta["complete"] is True and meta["summarized_questions"] == 3
    assert "Incomplete" not in (out / "summary.md").read_text() and (out / "report.html").exists()
    printed = run_cli(str(out), cwd=tmp_path, command="report")
    assert printed.returncode == 0 and "| unite | 3 | 0 | 0.0%" in printed.stdout, printed.stderr
    with open(out / "rows.csv", encoding="utf-8", newline="") as fh:
        assert len(list(csv.DictReader(fh))) == 9  # the repeated question-0 rows count once

    (out / "rows.jsonl").write_bytes((parts[1] / "rows.jsonl").read_bytes() + (parts[0] / "rows.jsonl").read_bytes()[:200])
    summary = rebuild_report(out)  # single:b finished, the other methods only question 0 (and a cut-off row)
    assert [(s["method"], s["n"]) for s in summary] == [("single:a", 1), ("single:b", 1), ("unite", 1)]
    assert json.loads((out / "meta.json").read_text())["complete"] is False
    assert "the 1 of 3 questions that every method has finished" in (out / "summary.md").read_text()
    with pytest.raises(EvaluationError, match=r"no meta\.json"):
        rebuild_report(tmp_path)


def test_missing_models_and_bad_settings_are_reported_before_running(tmp_path, fake):
    data = write_data(tmp_path / "q.jsonl", [(1, 2)])
    with pytest.raises(EvaluationError, match=r"Model\(s\) c were not loaded"):
        run_evaluation(config_for(tmp_path, data, methods="single:c,unite"), fake_models("a", "b"), progress=False)
    with pytest.raises(EvaluationError, match="safe-unite: The drafter 'z'"):
        run_evaluation(config_for(tmp_path, data, methods="safe-unite", drafter="z"), fake_models("a", "b"), progress=False)
    assert fake.calls == []


# -- end to end on tiny models --------------------------------------------------------------------------------------
@pytest.mark.slow
def test_end_to_end_on_tiny_models(tmp_path, tiny):
    data = tmp_path / "gsm.jsonl"
    items = [
        {"question": "Janet has 16 eggs and eats 3. How many are left?", "answer": "16 - 3 = 13\n#### 13"},
        {"question": "A robe takes 2 bolts of blue fiber and half that much white fiber. How many bolts in total?", "answer": "#### 3"},
        {"question": "Tom buys 4 books at $2.50 each. How much does he pay?", "answer": "4 * 2.5 = 10\n#### 10"},
        {"question": "Unused question.", "answer": "#### 1"},
    ]
    data.write_text("\n".join(json.dumps(i) for i in items) + "\n", encoding="utf-8")
    models = [tiny["qwen"], tiny["gemma3"]]
    config = EvalConfig(data=data, methods=parse_methods("single:tiny-smollm2,unite,safe-unite,specem"),
                        models=[m.name for m in models], settings=Settings(max_new_tokens=8), out=tmp_path / "out", limit=3)
    summary = run_evaluation(config, [*models, tiny["smollm2"]], progress=False, write_html=write_html_report)
    out = tmp_path / "out"
    for name in ("rows.jsonl", "rows.csv", "summary.csv", "summary.md", "meta.json"):
        assert (out / name).stat().st_size > 0, name
    labels = ["single:tiny-smollm2", "unite", "safe-unite", "specem"]
    meta = json.loads((out / "meta.json").read_text())
    qids = meta["question_ids"]
    assert len(qids) == 3 and qids == sorted(qids)
    rows = jsonl(out / "rows.jsonl")
    assert [(r["qid"], r["method"]) for r in rows] == [(q, m) for q in qids for m in labels]
    for r in rows:
        assert 0 < r["tokens"] <= 8 and r["latency_s"] > 0 and r["stop_reason"] in ("budget", "eos", "stop_string")
        assert r["error"] is None
        assert r["prediction"] == extract_answer(r["text"])
        assert r["correct"] == same_number(r["prediction"], r["gold"])
        assert r["corrupted"] == is_corrupted(r["text"]) and r["looping"] == is_looping(r["text"])
        assert r["gold"] == {0: "13", 1: "3", 2: "10", 3: "1"}[r["qid"]]
        assert r["et_ratio"] == 0.0 if r["method"] in ("single:tiny-smollm2", "specem") else 0.0 <= r["et_ratio"] <= 1.0
    assert all(r["et_ratio"] == 1.0 for r in rows if r["method"] == "unite")  # every-token fusion fuses every step
    for r in rows:  # SpecEM rows say which model's segments won and where the Hedge weights ended
        if r["method"] != "specem":
            assert r["segment_wins"] is None and r["final_weights"] is None
            continue
        assert set(r["segment_wins"]) == set(r["final_weights"]) == {"tiny-qwen", "tiny-gemma3"}
        assert sum(r["segment_wins"].values()) >= 1 and sum(r["final_weights"].values()) == pytest.approx(1, abs=1e-4)
    specem = [r for r in rows if r["method"] == "specem"]
    mean_qwen = sum(r["final_weights"]["tiny-qwen"] for r in specem) / 3
    wins_qwen = sum(r["segment_wins"]["tiny-qwen"] for r in specem)
    assert f"| specem | 3 | tiny-qwen | {wins_qwen} | {mean_qwen:.3f} |" in (out / "summary.md").read_text(encoding="utf-8")
    with open(out / "rows.csv", encoding="utf-8", newline="") as fh:
        csv_rows = list(csv.DictReader(fh))
    assert [(int(r["qid"]), r["method"], r["text"]) for r in csv_rows] == [(r["qid"], r["method"], r["text"]) for r in rows]
    assert [json.loads(c["final_weights"]) if c["final_weights"] else None for c in csv_rows] == [r["final_weights"] for r in rows]
    loaded = load_summary(out)
    assert loaded == summary and [s["method"] for s in loaded] == labels
    for s in loaded:
        mine = [r for r in rows if r["method"] == s["method"]]
        assert s["n"] == 3 and s["correct"] == sum(r["correct"] for r in mine)
        assert s["mean_tokens"] == pytest.approx(sum(r["tokens"] for r in mine) / 3, abs=1e-3)
        assert s["tokens_per_s"] == pytest.approx(sum(r["tokens"] for r in mine) / sum(r["latency_s"] for r in mine), rel=1e-3)
        assert s["ci_low"] <= s["accuracy"] <= s["ci_high"]
    assert meta["instruction"] == INSTRUCTION and meta["models"] == ["tiny-qwen", "tiny-gemma3"]
    assert meta["model_info"]["tiny-smollm2"]["architecture"] == "LlamaForCausalLM"
    md = (out / "summary.md").read_text()
    assert all(f"| {label} | 3 |" in md for label in labels)
    try:
        has_visual = hasattr(importlib.import_module("visual"), "write_report")
    except ImportError:
        has_visual = False
    assert (out / "report.html").exists() == has_visual

    # Running the same command again redoes nothing.
    before = (out / "rows.jsonl").read_bytes()
    run_evaluation(config, [*models, tiny["smollm2"]], progress=False)
    assert (out / "rows.jsonl").read_bytes() == before


# -- command line ---------------------------------------------------------------------------------------------------
def run_cli(*args, cwd, command="evaluate"):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "ensemble", command, *args], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=120)


def test_cli_errors_are_messages_not_tracebacks(tmp_path):
    data = write_data(tmp_path / "q.jsonl", [(1, 2)])
    cases = [
        (["--data", str(data), "--methods", "single:qwen,bestof", "--out", str(tmp_path / "o")], "Unknown method 'bestof'"),
        (["--data", str(tmp_path / "nope.jsonl"), "--methods", "unite", "--out", str(tmp_path / "o")], "does not exist"),
        (["--data", str(data), "--methods", "single:no-such-model", "--out", str(tmp_path / "o")], "single:no-such-model: Unknown model"),
        (["--data", str(data), "--methods", "unite", "--limit", "0", "--out", str(tmp_path / "o")], "--limit: must be at least 1"),
        (["--data", str(data), "--methods", "safe-gac", "--drafter", "nobody", "--out", str(tmp_path / "o")], "safe-gac: The drafter"),
    ]
    for args, message in cases:
        result = run_cli(*args, cwd=tmp_path)
        assert result.returncode == 2, (args, result.stderr)
        assert message in result.stderr, (args, result.stderr)
        assert "Traceback" not in result.stderr
    assert not (tmp_path / "o").exists()  # nothing ran, nothing was written
    result = run_cli(str(tmp_path), cwd=tmp_path, command="report")
    assert result.returncode == 2 and "has no meta.json" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.embedded
@pytest.mark.timing
def test_kill_stops_a_background_evaluation_and_writes_its_summary(tmp_path):
    """SIGTERM (what `kill PID` sends; a background job of a shell ignores Ctrl-C's SIGINT) ends the run cleanly."""
    data = write_data(tmp_path / "q.jsonl", [(i, i + 1) for i in range(6)])
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = tmp_path / "o"
    proc = subprocess.Popen(
        [sys.executable, "-m", "ensemble", "evaluate", "--data", str(data), "--methods", "single:smollm2",
         "--max-new-tokens", "48", "--out", str(out), "--no-progress"],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    deadline = time.monotonic() + 120
    while not ((out / "rows.jsonl").exists() and (out / "rows.jsonl").read_text().strip()):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.05)
    proc.terminate()
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert "Stopped after" in stderr and "Traceback" not in stderr
    rows = jsonl(out / "rows.jsonl")
    assert 1 <= len(rows) < 6
    meta = json.loads((out / "meta.json").read_text())
    assert meta["complete"] is False and meta["runs"][-1]["new_rows"] == len(rows)
    assert f"| single:smollm2 | {len(rows)} |" in (out / "summary.md").read_text()
