"""Member backends: Ray actors give token for token the runs of the in-process backend; sessions are isolated;
a killed member fails the run clearly, keeps the trace so far and is restarted; nothing outlives the process;
members on two nodes of a cluster give the same output."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from ensemble.errors import EnsembleError, MemberDied, SettingsError
from ensemble.members import make_backend, parse_resources
from ensemble.methods import EnsembleRun, generate
from ensemble.methods.base import TokenEvent
from ensemble.settings import Settings
from tests.conftest import ROOT

pytest.importorskip("ray")

PROMPT = "Tom has 3 apples and buys 5 more. How many apples does he have?"
LONG = "Explain step by step how a train journey from Sofia to Plovdiv is planned: tickets, times, stations and what to pack."  # a long answer from the embedded models
RUNS = [
    ("single", {}),
    ("unite", {}),
    ("gac", {"gac_gate": None}),
    ("safe", {"lookahead": 4}),
    ("safe", {"fusion": "gac", "lookahead": 3}),
    ("specem", {"segment_len": 6}),
]


def _numbers(record) -> dict:
    """Every number a token's record holds (its top-k, decision details, fusion record), timings left out."""
    data = record.to_dict()
    if data.get("fusion"):
        data["fusion"].pop("ms", None)
    return {k: data.get(k) for k in ("topk", "details", "fusion")}


def _digest(trace) -> dict:
    return {
        "text": trace.text,
        "decisions": [(r.decision, r.text, r.model, r.start, r.end, r.condition) for r in trace.tokens],
        "numbers": [_numbers(r) for r in trace.tokens],
        "passes": trace.stats.forward_passes,
        "forward_tokens": trace.stats.forward_tokens,
        "rounds": [(r.winner, r.accepted_text, r.scores) for r in trace.rounds],
        "error": trace.error,
    }


def _assert_same(remote, local, method: str, drafter: str) -> None:
    """Same text, decisions, rounds and forward passes; pipelined SAFE's drafter also drafted ahead (a round
    that ends in a replacement discards that draft), so its passes may only be more."""
    mine, theirs = _digest(remote), _digest(local)
    if method == "safe":
        for key in ("passes", "forward_tokens"):
            assert mine[key].pop(drafter) >= theirs[key].pop(drafter)
        assert all("overlap_s" in r.timings and "ahead_tokens" in r.details for r in remote.rounds)
    assert mine == theirs


@pytest.fixture(autouse=True)
def one_thread():
    """The in-process runs compute on one thread, as the members do (``threads=1``): a matrix product's sums run in
    another order on two threads, so its last bits, and the rounded probabilities the traces hold, would differ."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def ray_backend():
    backend = make_backend("ray", threads=1)
    yield backend
    backend.close()


@pytest.fixture(scope="module")
def members(tiny):
    return [tiny["qwen"], tiny["smollm2"], tiny["gemma3"]]


@pytest.mark.slow
@pytest.mark.parametrize(("method", "extra"), RUNS, ids=[f"{m}-{e.get('fusion', '')}" for m, e in RUNS])
def test_ray_members_give_the_local_output_token_for_token(ray_backend, members, method, extra):
    settings = Settings(max_new_tokens=24, stop_strings=[], **extra)
    local = generate(members, PROMPT, method, settings)
    remote = generate(members, PROMPT, method, settings, backend=ray_backend)
    assert local.error is None and remote.error is None
    _assert_same(remote, local, method, members[0].name)


@pytest.mark.slow
def test_pipelined_safe_takes_the_draft_made_ahead_when_a_round_is_accepted_whole(ray_backend, tiny):
    """Identical copies agree on every token, so every round is accepted whole: from round 2 on, each draft is
    the one made while the previous round verified, and nothing is drafted twice."""
    copies = [tiny["qwen"], tiny["qwen"], tiny["qwen"]]
    settings = Settings(max_new_tokens=30, stop_strings=[], lookahead=5)
    local = generate(copies, PROMPT, "safe", settings)
    remote = generate(copies, PROMPT, "safe", settings, backend=ray_backend)
    assert remote.text == local.text and remote.stats.et_ratio == 0
    assert [r.details["drafted_ahead"] for r in remote.rounds] == [False] + [True] * (len(remote.rounds) - 1)
    assert remote.stats.forward_passes == local.stats.forward_passes


@pytest.mark.slow
def test_sampled_specem_drafts_do_not_depend_on_the_backend(ray_backend, members):
    settings = Settings(max_new_tokens=20, stop_strings=[], segment_len=5, sample_drafts=True, seed=3)
    assert _digest(generate(members, PROMPT, "specem", settings, backend=ray_backend)) == _digest(
        generate(members, PROMPT, "specem", settings)
    )


@pytest.mark.slow
@pytest.mark.concurrency
def test_concurrent_runs_never_share_kv_state(ray_backend, members):
    """Two runs at once on the same actors (two app sessions) each give their solo run's trace."""
    jobs = [("safe", "Write a haiku about rain.", {}), ("unite", PROMPT, {})]
    solo = [
        _digest(generate(members, p, m, Settings(max_new_tokens=20, stop_strings=[], **e), backend=ray_backend)) for m, p, e in jobs
    ]
    out: dict[int, dict] = {}

    def work(i: int) -> None:
        m, p, e = jobs[i]
        out[i] = _digest(generate(members, p, m, Settings(max_new_tokens=20, stop_strings=[], **e), backend=ray_backend))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert [out[i] for i in range(len(jobs))] == solo


@pytest.mark.slow
def test_stop_ends_a_ray_run_and_keeps_its_trace(ray_backend, members):
    cancel = threading.Event()
    job = EnsembleRun(members, PROMPT, "unite", Settings(max_new_tokens=200, stop_strings=[]), cancel=cancel, backend=ray_backend)
    for i, _ in enumerate(job.events()):
        if i == 3:
            cancel.set()
    assert job.trace.stats.stop_reason == "cancelled"
    assert 3 <= job.trace.stats.generated_tokens < 10


@pytest.mark.slow
def test_a_killed_member_fails_the_run_clearly_and_the_next_run_restarts_it(ray_backend, members):
    settings = Settings(max_new_tokens=60, stop_strings=[])
    generate(members, PROMPT, "unite", Settings(max_new_tokens=2, stop_strings=[]), backend=ray_backend)  # actors up
    victim = ray_backend.member_info()[members[1].name]["pid"]
    job = EnsembleRun(members, PROMPT, "unite", settings, backend=ray_backend)
    with pytest.raises(MemberDied, match=rf"Member {members[1].name}'s process \(pid {victim}\) stopped"):
        for i, _ in enumerate(job.events()):
            if i == 4:
                os.kill(victim, signal.SIGKILL)
    assert job.trace.stats.stop_reason == "member_failed" and "stopped during the run" in job.trace.error
    assert job.trace.stats.generated_tokens >= 4  # the trace so far is kept
    again = generate(members, PROMPT, "unite", Settings(max_new_tokens=8, stop_strings=[]), backend=ray_backend)
    assert again.error is None and ray_backend.member_info()[members[1].name]["pid"] != victim
    assert _digest(again) == _digest(generate(members, PROMPT, "unite", Settings(max_new_tokens=8, stop_strings=[])))


def _ray_processes() -> set[int]:
    out = subprocess.run(["ps", "-eo", "pid=,args="], capture_output=True, text=True).stdout
    marks = ("raylet", "gcs_server", "ray::", "default_worker.py", "dashboard", "log_monitor")
    return {int(line.split(None, 1)[0]) for line in out.splitlines() if any(m in line for m in marks)}


@pytest.mark.slow
@pytest.mark.timing
def test_no_ray_process_outlives_the_coordinator(tmp_path):
    """A coordinator (CLI-like script) that starts Ray, runs on actors and exits leaves nothing behind."""
    script = tmp_path / "coordinator.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import sys
            sys.path.insert(0, {str(ROOT)!r})
            from tests.conftest import _tiny, unpack_tokenizer_fixture  # not tests/ on the path: tests/ensemble would hide ensemble
            from ensemble import models
            from ensemble.members import make_backend
            from ensemble.methods import generate
            from ensemble.settings import Settings
            folder = unpack_tokenizer_fixture("smollm2", __import__("pathlib").Path({str(tmp_path)!r}) / "tok")
            tok = models.load_saved_tokenizer(folder)
            m = models.wrap("tiny-smollm2", _tiny("smollm2", tok), tok)
            trace = generate([m], "Hi", "single", Settings(max_new_tokens=4, stop_strings=[]), backend=make_backend("ray", threads=1))
            print("tokens", trace.stats.generated_tokens, flush=True)
            """
        )
    )
    before = _ray_processes()
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0 and "tokens 4" in done.stdout, done.stderr[-2000:]
    deadline = time.time() + 30
    while (left := _ray_processes() - before) and time.time() < deadline:
        time.sleep(0.5)
    assert not left, subprocess.run(["ps", "-o", "pid,args", "-p", ",".join(map(str, left))], capture_output=True, text=True).stdout


@pytest.mark.slow
def test_members_on_two_cluster_nodes_give_the_local_output(members, ray_backend):
    """A two-node Ray cluster on this machine (``ray.cluster_utils.Cluster``), each node with its own custom
    resource; members are pinned to different nodes and the run equals the in-process one."""
    import ray
    from ray.cluster_utils import Cluster

    from ensemble.members.ray import RayBackend

    ray_backend.close()  # one Ray connection per process: leave the local cluster first
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "resources": {"node_a": 1}})
    cluster.add_node(num_cpus=1, resources={"node_b": 1})
    cluster.wait_for_nodes()
    backend = RayBackend(
        address=cluster.address,
        # an actor holds what it asks for while it lives: two members share node_b with half of it each
        resources={members[0].name: {"node_a": 1}, members[1].name: {"node_b": 0.5}, members[2].name: {"node_b": 0.5}},
        threads=1,
    )
    try:
        settings = Settings(max_new_tokens=16, stop_strings=[], lookahead=4)
        remote = generate(members, PROMPT, "safe", settings, backend=backend)
        info = backend.member_info()
        assert info[members[0].name]["node"] != info[members[1].name]["node"] == info[members[2].name]["node"]
        _assert_same(remote, generate(members, PROMPT, "safe", settings), "safe", members[0].name)
    finally:
        backend.close()
        ray.shutdown()
        cluster.shutdown()


def test_member_resources_parse_and_bad_ones_are_clear():
    assert parse_resources("qwen=gpu:1, gemma3=cpu:2+node_b:1,smollm2=node_c") == {
        "qwen": {"num_gpus": 1.0},
        "gemma3": {"num_cpus": 2.0, "node_b": 1.0},
        "smollm2": {"node_c": 1.0},
    }
    for bad in ("qwen", "qwen=", "=gpu:1", "qwen=gpu:x", "qwen=gpu:-1"):
        with pytest.raises(EnsembleError):
            parse_resources(bad)
    with pytest.raises(EnsembleError, match="Unknown backend 'mpi'"):
        make_backend("mpi")


def test_cli_refuses_ray_flags_without_the_ray_backend():
    from ensemble.cli.options import backend_from_args

    class Args:
        backend, ray_address, member_resources, member_threads = "local", None, "qwen=gpu:1", None

    with pytest.raises(SettingsError, match="need --backend ray"):
        backend_from_args(Args())


@pytest.mark.slow
@pytest.mark.parametrize("fusion", ["unite", "gac"])
def test_pipelined_safe_with_another_drafter_and_two_members(ray_backend, tiny, fusion):
    pair = [tiny["gemma3"], tiny["smollm2"]]
    settings = Settings(max_new_tokens=24, stop_strings=[], lookahead=3, fusion=fusion, drafter=tiny["smollm2"].name)
    remote = generate(pair, PROMPT, "safe", settings, backend=ray_backend)
    _assert_same(remote, generate(pair, PROMPT, "safe", settings), "safe", tiny["smollm2"].name)


@pytest.mark.slow
@pytest.mark.embedded
def test_a_weightless_coordinator_runs_embedded_members_in_their_processes(pool, embedded):
    """On the Ray backend the coordinator loads tokenizers and configs only (a meta-device skeleton, no memory);
    each member process loads its model by name, and the run equals the in-process one on loaded models."""
    from ensemble.models import ModelPool

    backend = make_backend("ray", threads=1)
    light = ModelPool(dtype="float32", runtime="transformers", weights=not backend.remote)
    assert not light.weights
    members = light.get_many(["qwen", "smollm2"])
    assert all(not m.has_weights and next(m.model.parameters()).is_meta for m in members)
    assert light.held_bytes() == 0
    settings = Settings(max_new_tokens=24, stop_strings=[], lookahead=4)
    remote = generate(members, PROMPT, "safe", settings, backend=backend)
    local = generate([embedded["qwen"], embedded["smollm2"]], PROMPT, "safe", settings)
    _assert_same(remote, local, "safe", "qwen")
    specem = generate(members, PROMPT, "specem", Settings(max_new_tokens=16, stop_strings=[]), backend=backend)
    assert specem.text == generate([embedded["qwen"], embedded["smollm2"]], PROMPT, "specem", Settings(max_new_tokens=16, stop_strings=[])).text


def test_the_backend_named_by_the_environment(monkeypatch):
    from ensemble.members import backend_from_env

    monkeypatch.setenv("ENSEMBLE_LENS_BACKEND", "ray")
    assert backend_from_env() == ("ray", "set by ENSEMBLE_LENS_BACKEND")
    monkeypatch.setenv("ENSEMBLE_LENS_BACKEND", "mpi")
    name, why = backend_from_env()
    assert name == "local" and "'mpi' is not one of auto, local, ray" in why
    monkeypatch.setenv("ENSEMBLE_LENS_BACKEND", "auto")  # measured: in process is faster on one machine
    assert backend_from_env()[0] == "local" and "measured no faster" in backend_from_env()[1]
    assert make_backend("auto", address="auto").name == "ray"  # a cluster named: its members go there


@pytest.mark.slow
@pytest.mark.embedded
@pytest.mark.llamacpp
@pytest.mark.concurrency
@pytest.mark.timing
def test_stop_reaches_a_member_inside_its_draft_within_one_pass(ray_backend, llama_pool):
    """A greedy draft is one call to the drafter's process (40 passes here, about 2 s): a Stop pressed meanwhile
    reaches the member, which runs at most the pass in flight, and the run ends at once."""
    import ray

    members = llama_pool.get_many(["qwen", "smollm2"])
    cancel, committed, ended = threading.Event(), threading.Event(), threading.Event()
    settings = Settings(max_new_tokens=200, stop_strings=[], lookahead=40)
    job = EnsembleRun(members, LONG, "safe", settings, cancel=cancel,
                      backend=ray_backend)
    actor = ray_backend.member(members[0]).actor

    def consume():
        for event in job.events():
            if isinstance(event, TokenEvent):
                committed.set()
        ended.set()

    threading.Thread(target=consume, daemon=True).start()
    assert committed.wait(120)  # round 0 is decided; the drafter now drafts (ahead, or round 1)
    start = ray.get(actor.passes.remote())["passes"]
    deadline = time.time() + 60
    while ray.get(actor.passes.remote())["passes"] < start + 3 and time.time() < deadline:  # a draft is computing
        time.sleep(0.01)
    assert not ended.is_set(), "the answer ended before a later draft could be stopped"
    before = ray.get(actor.passes.remote())["passes"]
    stopped = time.perf_counter()
    cancel.set()
    assert ended.wait(30)
    took = time.perf_counter() - stopped
    time.sleep(1.0)  # the member's queue: whatever it still ran would show now
    report = ray.get(actor.passes.remote())
    assert job.trace.stats.stop_reason == "cancelled" and took < 0.5
    assert report["after_stop"] and report["after_stop"][-1] <= 1  # this run: only the pass in flight when the Stop arrived
    assert report["passes"] - before <= 2  # the one in flight, and one begun before the Stop arrived (< 60 ms)


def _cli_on_ray(tmp_path: Path, name: str) -> tuple[subprocess.Popen, Path]:
    out = tmp_path / f"{name}.json"
    cmd = [sys.executable, "-m", "ensemble", "generate", "--backend", "ray", "--method", "unite", "--models", "qwen,smollm2",
           "--prompt", LONG, "--max-new-tokens", "300", "--out", str(out),
           "--runtime", "llamacpp"]  # members map their GGUF files, which tells the test which process holds which
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    printed: list[str] = []
    threading.Thread(target=lambda: printed.extend(iter(lambda: proc.stdout.read(1), "")), daemon=True).start()
    deadline = time.time() + 240
    while time.time() < deadline and len(printed) < 40 and proc.poll() is None:  # the answer is streaming
        time.sleep(0.2)
    proc.printed = printed
    return proc, out


def _cli_members(proc: subprocess.Popen) -> dict[int, str]:
    import psutil

    out = {}
    try:
        tree = psutil.Process(proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return out
    for p in tree:
        try:
            if "MemberActor" in " ".join(p.cmdline()):
                mapped = " ".join(m.path for m in p.memory_maps())
                out[p.pid] = next((n for n in ("qwen", "smollm2") if f"/{n}-" in mapped), "?")
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return out


@pytest.mark.slow
@pytest.mark.embedded
@pytest.mark.llamacpp
def test_the_cli_on_ray_says_which_member_died_keeps_the_trace_and_leaves_no_process(tmp_path, llama_pool):
    """``generate --backend ray``: a member killed mid-answer ends the command with its name and pid (exit 1), the
    trace so far saved with --out; a command stopped with SIGTERM (as Ctrl-C) keeps its trace too (exit 0, stop
    reason "cancelled"); after either, none of the Ray processes it started is left."""
    import json

    import psutil

    proc, out = _cli_on_ray(tmp_path, "killed")
    started = [psutil.Process(pid) for pid in _cli_members(proc)]
    victim = next(pid for pid, name in _cli_members(proc).items() if name == "smollm2")
    os.kill(victim, signal.SIGKILL)
    proc.wait(120)
    stderr = proc.stderr.read()
    assert proc.returncode == 1, stderr
    assert f"error: Member smollm2's process (pid {victim}) stopped during the run. The trace so far is kept" in stderr
    trace = json.loads(out.read_text())
    assert trace["stats"]["stop_reason"] == "member_failed" and len(trace["tokens"]) >= 10
    # what it printed is the trace's text; Ray's own notice of the killed worker ("(raylet) A worker died ...") goes to
    # the same stdout and may land inside it, depending on when the raylet writes it
    printed = re.sub(r"(\x1b\[\d+m)?\(raylet\)(\x1b\[0m)?[^\n]*\n", "", "".join(proc.printed))
    assert printed.startswith(trace["text"])

    proc, out = _cli_on_ray(tmp_path, "stopped")
    started += [p for p in psutil.Process(proc.pid).children(recursive=True)]
    proc.send_signal(signal.SIGTERM)
    proc.wait(120)
    stderr = proc.stderr.read()
    assert proc.returncode == 0, stderr
    trace = json.loads(out.read_text())
    assert trace["stats"]["stop_reason"] == "cancelled" and 0 < len(trace["tokens"]) < 300
    time.sleep(3)
    left = [p.pid for p in started if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert not left, f"Ray processes left after the command exited: {left}"
