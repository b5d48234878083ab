"""Members on vLLM servers (issue 36): vLLM's CPU build serves the embedded models' float copies in float32, one
``vllm.entrypoints.openai.api_server`` process per member, started once for this module; SAFE and UniTE on them give
the text and decisions of the same float32 models in process on transformers.

vLLM pins an older transformers, so it lives in its own virtualenv: ``make test-vllm`` builds ``.venv-vllm`` and runs
this file with ``ENSEMBLE_LENS_VLLM_PYTHON`` naming its Python. Without that variable (the plain suite) these tests
are skipped; with it, a broken virtualenv or a server that does not start fails them, naming the server's log.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from ensemble import models
from tests.conftest import free_port
from tests.ensemble.members.server_parity import assert_same_runs

pytestmark = [pytest.mark.vllm, pytest.mark.embedded, pytest.mark.concurrency, pytest.mark.slow]

PYTHON_ENV = "ENSEMBLE_LENS_VLLM_PYTHON"
MEMBERS = ("qwen", "smollm2")  # the default ensemble's two members
START_S = 900  # two servers starting at once on 2 cores under load: about a minute each when idle
FLAGS = ["--dtype", "float32", "--max-logprobs", "64", "--max-model-len", "2048", "--enforce-eager"]
"""float32 as in process; room for a top 20 and more; ``--enforce-eager``: no torch.compile warm-up (minutes here)."""


def vllm_python() -> str:
    python = os.environ.get(PYTHON_ENV, "")
    if not python:
        pytest.skip(f"vLLM's CPU build is not set up ({PYTHON_ENV} is unset): `make test-vllm` installs it into "
                    ".venv-vllm and runs these tests")
    if not os.access(python, os.X_OK):
        pytest.fail(f"{PYTHON_ENV}={python} is not an executable Python: `make test-vllm` builds .venv-vllm")
    return python


def _tail(log: Path, lines: int = 15) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def start_vllm(python: str, name: str, log: Path) -> tuple[subprocess.Popen, str]:
    """vLLM's OpenAI-compatible server on an embedded model's float copy (the cache API finds it), output to ``log``,
    in a session of its own so that its engine and worker processes stop with it."""
    folder = models.prepare(name, models.quiet_progress)
    port = free_port()
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "2", "VLLM_CPU_OMP_THREADS_BIND": "nobind",
           "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [python, "-m", "vllm.entrypoints.openai.api_server", "--model", str(folder), "--host", "127.0.0.1",
             "--port", str(port), *FLAGS],
            stdout=out, stderr=subprocess.STDOUT, env=env, cwd=log.parent, start_new_session=True,
        )
    return proc, f"http://127.0.0.1:{port}/v1"


def wait_ready(name: str, proc: subprocess.Popen, url: str, log: Path, deadline: float) -> None:
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(url + "/models", timeout=5).read()
            return
        except OSError:
            pass
        if proc.poll() is not None:
            pytest.fail(f"vLLM's server for {name} exited ({proc.returncode}) before it answered; its log, {log}, "
                        f"ends:\n{_tail(log)}")
        time.sleep(1)
    pytest.fail(f"vLLM's server for {name} did not answer in {START_S} s; its log, {log}, ends:\n{_tail(log)}")


def stop(proc: subprocess.Popen) -> None:
    """The server and the processes it started (its session): asked to stop, then killed with what is left."""
    for sig, wait in ((signal.SIGTERM, 30), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:  # none of them is left
            return
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=wait)


@pytest.fixture(scope="module")
def vllm_servers(tmp_path_factory):
    python = vllm_python()
    logs = tmp_path_factory.mktemp("vllm")
    started: dict[str, tuple[subprocess.Popen, str, Path]] = {}
    try:
        for name in MEMBERS:  # both start at once
            log = logs / f"{name}.log"
            started[name] = (*start_vllm(python, name, log), log)
        deadline = time.monotonic() + START_S
        for name, (proc, url, log) in started.items():
            wait_ready(name, proc, url, log, deadline)
        yield {name: url for name, (_, url, _) in started.items()}
    finally:
        for proc, _, _ in started.values():
            stop(proc)


def remote_members(pool, servers):
    return pool.get_many([f"{name}={url}" for name, url in servers.items()], models.quiet_progress)


def test_vllm_members_take_token_ids_and_answer_every_position_at_once(pool, vllm_servers):
    """At connect a vLLM server is found to take prompts as token ids and to answer ``prompt_logprobs``, its top 20
    (under ``--max-logprobs 64``), and its context; it tokenizes the probe text as the local tokenizer does."""
    for member in remote_members(pool, vllm_servers):
        endpoint = member.model
        assert (endpoint.ids_prompt, endpoint.prompt_logprobs, endpoint.k) == (True, True, 20)
        assert endpoint.context_limit == 2048 and endpoint.bos == 0
        assert Path(endpoint.model_id) == models.prepare(member.name, models.quiet_progress)


@pytest.mark.parametrize("method,budget", [("safe", 24), ("unite", 12), ("specem", 16)])
def test_vllm_members_give_the_in_process_text_and_decisions(pool, vllm_servers, method, budget):
    """The same tokens and decisions as the same float32 models in process on transformers (with the near-tie
    allowance of :func:`server_parity.assert_same_runs`: vLLM's CPU kernels are not torch's eager ones). SpecEM
    too, which decides otherwise on llama.cpp's server: a verifier scoring another member's draft reads tokens it
    ranks low, and vLLM's ``prompt_logprobs`` give each prompt token's own log-probability beside the top k."""
    remote = remote_members(pool, vllm_servers)
    local = pool.get_many(list(vllm_servers), models.quiet_progress)
    assert [m.info["top_k"] for m in remote] == [20, 20]
    found = assert_same_runs(local, remote, method, budget)
    print(method, "first difference and tokens compared per question:", found)
