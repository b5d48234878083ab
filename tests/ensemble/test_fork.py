"""Forks: continuing a run from one of its tokens with another method (``ensemble.fork``), its CLI and its view."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

import visual
from ensemble.errors import InputError, TraceFormatError
from ensemble.fork import compare_continuations, fork_point, fork_settings, member_names, run_fork, start_fork
from ensemble.methods import generate
from ensemble.settings import Settings
from ensemble.trace import Decision, RunTrace, TokenRecord
from tests.conftest import ROOT

PROMPT = "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. How many?"


def _greedy_continuation(loaded, prompt: str, kept: str, n: int) -> str:
    """What plain transformers generate() writes after the prompt and the kept text (tokenized as a whole)."""
    ids = loaded.prompt_ids(prompt) + loaded.keys.encode(kept)
    with torch.inference_mode():
        out = loaded.model.generate(torch.tensor([ids]), max_new_tokens=n, do_sample=False)
    gen = out[0, len(ids):].tolist()
    eos = loaded.keys.eos_ids
    gen = gen[: next((i for i, t in enumerate(gen) if t in eos), len(gen))]
    return loaded.tokenizer.decode(gen)


@pytest.mark.embedded
def test_the_drafter_alone_fork_of_safe_equals_plain_generate(embedded):
    """The headline question, "what would the drafter alone have written here?", answered by the model's own
    generate() on the same prompt and kept text."""
    models = [embedded["qwen"], embedded["smollm2"], embedded["gemma3"]]
    trace = generate(models, PROMPT, "safe", Settings(max_new_tokens=40, stop_strings=[]))
    for at in (5, 21):
        forked, comparison = run_fork([embedded["qwen"]], trace, at, "drafter", fork_settings(trace, "drafter", at))
        assert forked.method == "single" and forked.models == ["qwen"] and forked.fork["method"] == "safe"
        assert forked.text.startswith(comparison.kept) and comparison.kept == trace.text[: trace.tokens[at].start]
        expected = _greedy_continuation(embedded["qwen"], PROMPT, comparison.kept, 40 - at)
        assert comparison.forked == expected
        assert len(forked.tokens) == 40 - at


@pytest.mark.embedded
@pytest.mark.parametrize("name", ["qwen", "smollm2", "gemma3"])
def test_a_fork_at_the_runs_own_settings_reproduces_it(embedded, name):
    """Greedy, one model: forked anywhere, the fork writes exactly what the run wrote (the kept text tokenizes
    back into the model's own tokens; the tiny random models' gibberish does not, so real models are used)."""
    trace = generate([embedded[name]], PROMPT, "single", Settings(max_new_tokens=32, stop_strings=[]))
    assert len(trace.tokens) == 32
    for at in (0, 5, 13, 26, 31):
        forked, comparison = run_fork([embedded[name]], trace, at, "single")
        assert comparison.divergence is None and forked.text == trace.text, (name, at)
        assert [t.text for t in forked.tokens] == [t.text for t in trace.tokens[fork_point(trace, at)[0]:]]


@pytest.mark.parametrize("method", ["unite", "gac", "safe", "specem"])
def test_an_ensemble_forked_at_its_start_reproduces_it_and_forks_validate(tiny, method):
    models = [tiny["qwen"], tiny["smollm2"], tiny["gemma3"]]
    trace = generate(models, PROMPT, method, Settings(max_new_tokens=16, stop_strings=[]))
    forked, comparison = run_fork(models, trace, 0, method)
    assert comparison.divergence is None and forked.text == trace.text
    # a fork in the middle: its tokens cover what it wrote after the kept text, and it survives a JSON round trip
    at = len(trace.tokens) // 2
    forked, comparison = run_fork(models, trace, at, method)
    chars = trace.tokens[fork_point(trace, at)[0]].start
    assert forked.fork == {"at": fork_point(trace, at)[0], "chars": chars, "method": method, "models": trace.models}
    assert forked.tokens[0].start == chars and forked.text[:chars] == trace.text[:chars]
    again = RunTrace.from_json(forked.to_json())
    assert again.to_dict() == forked.to_dict()
    assert visual.strip_html(again).startswith('<span class="el-kept"')


def test_fork_settings_are_the_runs_with_what_the_engine_resolved_reset():
    trace = RunTrace(method="safe", models=["a", "b"], settings={**Settings().to_dict(), "sharpen": "heuristic",
                     "max_new_tokens": 50, "lookahead": 7, "drafter": "b"}, prompt="p", drafter="b")
    same = fork_settings(trace, "safe", 10)
    assert (same.sharpen, same.lookahead, same.max_new_tokens, same.drafter) == ("heuristic", 7, 40, "b")
    other = fork_settings(trace, "unite", 10)
    assert other.sharpen is None and other.sharpen_for("unite") == "none" and other.lookahead == 7
    alone = fork_settings(trace, "drafter", 49, max_new_tokens=5)
    assert alone.drafter is None and alone.max_new_tokens == 5
    assert fork_settings(trace, "drafter", 60).max_new_tokens == 1
    assert member_names(trace, "drafter") == ["b"] and member_names(trace, "safe") == ["a", "b"]
    copies = RunTrace(method="unite", models=["qwen", "qwen#2"], settings={}, prompt="p", drafter="qwen")
    assert member_names(copies, "unite") == ["qwen", "qwen"]
    with pytest.raises(InputError, match="Unknown fork method"):
        fork_settings(trace, "magic", 1)


def _trace(pieces: list[str], text: str | None = None) -> RunTrace:
    tokens, pos = [], 0
    for i, piece in enumerate(pieces):
        tokens.append(TokenRecord(index=i, text=piece, start=pos, end=pos + len(piece), model="a", decision=Decision.DRAFTER))
        pos += len(piece)
    return RunTrace(method="single", models=["a"], settings={}, prompt="p", text=text or "".join(pieces), tokens=tokens)


def test_fork_points_keep_whole_characters():
    trace = _trace(["Hi", " 中"])
    # the character 中 as three byte tokens sharing its span: a fork inside it re-decides the whole character
    trace.tokens[1:] = [TokenRecord(index=1 + k, text=f"<0x{b:02X}>" if k < 2 else " 中", start=2, end=4, model="a",
                                    decision=Decision.DRAFTER) for k, b in enumerate((0xE4, 0xB8, 0))]
    assert fork_point(trace, 3) == (1, 2) and fork_point(trace, 1) == (1, 2)
    assert fork_point(trace, 0) == (0, 0) and fork_point(trace, 4) == (4, 4)
    for bad in (-1, 5, "3", True):
        with pytest.raises(InputError, match="token"):
            fork_point(trace, bad)


def test_the_comparison_marks_the_first_difference_and_the_changed_words():
    parent = _trace(["The", " answer", " is", " 72", "."])
    child = _trace(["The", " answer", " is", " 42", " now", "."])
    child.tokens, child.fork = child.tokens[3:], {"at": 3, "chars": 13, "method": "single", "models": ["a"]}
    for i, t in enumerate(child.tokens):
        t.index = i
    RunTrace.from_dict(child.to_dict())  # a valid trace: the tokens cover the text after the kept characters
    c = compare_continuations(parent, child)
    assert (c.kept, c.original, c.forked, c.divergence) == ("The answer is", " 72.", " 42 now.", 1)
    assert [d for d in c.diff if d[0] != "equal"] == [["replace", "72", "42 now"]]
    html = visual.fork_html(parent, child, c.to_dict())
    assert "<del>72</del>" in html and "<ins>42 now</ins>" in html
    assert html.count('class="el-fork-split"') == 2 and "They part after 1 character" in html
    same = compare_continuations(parent, parent)
    assert same.divergence is None and same.diff == [["equal", "The answer is 72.", "The answer is 72."]]
    other = _trace(["Another", " text"])
    other.fork = {"at": 1, "chars": 7, "method": "single", "models": ["a"]}
    other.tokens = other.tokens[1:]
    other.tokens[0].index = 0
    with pytest.raises(InputError, match="does not continue"):
        compare_continuations(parent, other)


def test_fork_views_escape_model_output():
    parent = _trace(["<b>x</b>", " <img src=x onerror=alert(1)>"])
    child = _trace(["<b>x</b>", "<script>alert(2)</script>"])
    child.tokens, child.fork = child.tokens[1:], {"at": 1, "chars": 8, "method": "single", "models": ["<i>a</i>"]}
    child.tokens[0].index = 0
    html = visual.fork_html(parent, child, compare_continuations(parent, child).to_dict())
    strip = visual.strip_html(child)
    for out in (html, strip):
        assert "<script>" not in out and "<img" not in out and "<b>x" not in out and "<i>a" not in out


@pytest.mark.parametrize(
    "fork",
    [{"at": 1, "chars": 99, "method": "single", "models": ["a"]}, {"at": "1", "chars": 0, "method": "single", "models": []},
     {"at": 1, "chars": 1, "method": "single", "models": [3]}, [1, 2]],
)
def test_malformed_fork_records_are_refused(fork):
    data = _trace(["ab"]).to_dict() | {"fork": fork}
    with pytest.raises(TraceFormatError, match="fork"):
        RunTrace.from_dict(data)


def test_a_fork_whose_tokens_do_not_start_at_the_kept_text_is_refused():
    data = _trace(["ab", "cd"]).to_dict() | {"fork": {"at": 1, "chars": 1, "method": "single", "models": ["a"]}}
    with pytest.raises(TraceFormatError, match="starts at 0"):
        RunTrace.from_dict(data)


def test_stop_ends_a_fork_with_a_valid_partial_trace(tiny):
    import threading

    trace = generate([tiny["qwen"]], PROMPT, "single", Settings(max_new_tokens=20, stop_strings=[]))
    cancel = threading.Event()
    job = start_fork([tiny["qwen"]], trace, 4, "single", cancel=cancel)
    for n, _ in enumerate(job.events()):
        if n == 3:
            cancel.set()
    assert job.trace.stats.stop_reason == "cancelled" and 0 < len(job.trace.tokens) < 16
    RunTrace.from_json(job.trace.to_json())
    assert compare_continuations(trace, job.trace).divergence is not None  # it stopped short of the run


def _cli(*args, cwd):
    env = dict(os.environ, PYTHONPATH=str(ROOT), ENSEMBLE_LENS_RUNTIME="transformers")
    return subprocess.run([sys.executable, "-m", "ensemble", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=600)


@pytest.mark.embedded
def test_fork_command(tmp_path, embedded):
    trace = generate([embedded["smollm2"], embedded["gemma3"]], PROMPT, "safe", Settings(max_new_tokens=20))
    saved = tmp_path / "run.json"
    saved.write_text(trace.to_json(), encoding="utf-8")
    done = _cli("fork", str(saved), "--at", "6", "--method", "drafter", "--out", str(tmp_path / "fork.json"), "--json",
                cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    forked = RunTrace.from_dict(result["fork"])
    assert forked.models == ["smollm2"] and forked.fork["at"] == 6
    assert result["comparison"]["original"] == trace.text[trace.tokens[6].start:]
    assert RunTrace.from_json((tmp_path / "fork.json").read_bytes()).text == forked.text
    text = _cli("fork", str(saved), "--at", "6", "--method", "safe", cwd=tmp_path)
    assert text.returncode == 0 and "the fork (safe on smollm2, gemma3) went on" in text.stderr, text.stderr
    assert "identical continuations" in text.stderr or "they part after" in text.stderr
    for args, message in [(("--at", "999"), "is not in this run"), (("--at", "1", "--method", "magic"), "invalid choice"),
                          (("--at", "1", "--max-new-tokens", "0"), "max_new_tokens")]:
        bad = _cli("fork", str(saved), *args, cwd=tmp_path)
        assert bad.returncode == 2 and message in bad.stderr and "Traceback" not in bad.stderr, bad.stderr
    (tmp_path / "junk.json").write_bytes(b"\xff\xfe not json")
    bad = _cli("fork", str(tmp_path / "junk.json"), "--at", "1", cwd=tmp_path)
    assert bad.returncode == 2 and "not UTF-8" in bad.stderr


# -- issue 39: every text diff bounded ----------------------------------------------------------------------------
def test_the_word_diff_is_bounded_whatever_the_texts(monkeypatch):
    """Two 20,000-word answers (what made one /explain_answers call take 126 s): the matcher sees only the differing
    middle, never more than MAX_DIFF_PAIRS word pairs, and past that the middle is one coarse replace."""
    import difflib

    from ensemble import fork

    seen = []
    real = difflib.SequenceMatcher

    def counting(junk, a, b, autojunk=True):
        seen.append(len(a) * len(b))
        assert seen[-1] <= fork.MAX_DIFF_PAIRS, f"the matcher was given {len(a)} x {len(b)} words"  # fails fast
        return real(junk, a, b, autojunk=autojunk)

    monkeypatch.setattr(fork.difflib, "SequenceMatcher", counting)
    a, b = " a" * 20_000, " b" * 20_000
    result = fork.compare_texts(a, b)
    assert result.coarse and result.diff == [["equal", " ", " "], ["replace", a[1:], b[1:]]] and result.divergence == 1
    # a shared beginning and end are set aside first: one changed word in a long answer is still a fine diff
    seen.clear()
    long_a, long_b = "x " * 10_000 + "cat " + "y " * 10_000, "x " * 10_000 + "dog " + "y " * 10_000
    fine = fork.compare_texts(long_a, long_b)
    assert not fine.coarse and max(seen) <= 4
    assert [op for op, _, _ in fine.diff] == ["equal", "replace", "equal"] and fine.diff[1][1:] == ["cat", "dog"]
    assert "".join(x for _, x, _ in fine.diff) == long_a and "".join(y for _, _, y in fine.diff) == long_b


def test_small_texts_keep_their_word_diff():
    from ensemble.fork import compare_texts

    result = compare_texts("The cat sat on the mat.", "The dog sat on a mat.")
    assert not result.coarse
    assert [d for d in result.diff if d[0] != "equal"] == [["replace", "cat", "dog"], ["replace", "the", "a"]]
    assert compare_texts("same", "same").diff == [["equal", "same", "same"]] and compare_texts("", "").diff == []


def test_a_lone_surrogate_in_the_forced_key_is_one_plain_sentence():
    from ensemble.fork import check_force

    with pytest.raises(InputError, match="lone surrogate"):
        check_force("a\ud800")
