"""Members on OpenAI-compatible servers (issue 36): real ``python -m llama_cpp.server`` processes on the embedded
GGUF files, started once for this module, give the in-process llama.cpp members' text and decisions; a server that
refuses, fails or dies mid-run ends the run with a message naming it and the trace so far.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ensemble import models
from ensemble.errors import InputError
from ensemble.members.server import ServerError
from ensemble.methods import EnsembleRun
from ensemble.models.catalogue import SERVER_KIND, resolve, split_server
from ensemble.models.runtimes import runtime_info, split_runtime
from ensemble.settings import Settings
from tests.conftest import free_port
from tests.ensemble.members.server_parity import QUESTIONS, assert_same_runs

pytestmark = [pytest.mark.llamacpp, pytest.mark.embedded, pytest.mark.concurrency]

def start_server(name: str) -> tuple[subprocess.Popen, str]:
    """``llama_cpp.server`` on an embedded model's GGUF (the cache API finds it), one thread, prompt rows kept."""
    from ensemble.models import prepare_gguf

    port = free_port()
    gguf = prepare_gguf(name, models.quiet_progress) / "model.gguf"
    proc = subprocess.Popen(
        [sys.executable, "-m", "llama_cpp.server", "--model", str(gguf), "--host", "127.0.0.1", "--port", str(port),
         "--n_threads", "1", "--n_threads_batch", "1", "--logits_all", "true", "--n_ctx", "2048"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(url + "/models", timeout=2).read()
            return proc, url
        except OSError:
            if proc.poll() is not None:
                break
            time.sleep(0.3)
    proc.kill()
    pytest.fail(f"llama_cpp.server for {name} did not start")


@pytest.fixture(scope="module")
def servers(llama_pool):
    started = {name: start_server(name) for name in ("qwen", "smollm2")}
    yield {name: url for name, (_, url) in started.items()}
    for proc, _ in started.values():
        proc.terminate()
        proc.wait(timeout=10)


def members(pool, servers):
    return pool.get_many([f"{name}={url}" for name, url in servers.items()], models.quiet_progress)


def test_names_with_urls_resolve_to_server_members():
    assert split_server("qwen=http://user@host:8001/v1?a=b") == ("qwen", "http://user@host:8001/v1?a=b")
    assert split_server("qwen") is None and split_server("a=b") is None
    assert split_runtime("qwen=http://u@llamacpp/v1") == ("qwen=http://u@llamacpp/v1", None)
    spec = resolve("smollm2=http://127.0.0.1:9/v1")
    assert (spec.kind, spec.name, spec.location, spec.tokenizer) == (SERVER_KIND, "smollm2", "http://127.0.0.1:9/v1", "smollm2")
    info = runtime_info(models.runtimes.pick_runtime(spec, "llamacpp"))
    assert info.remote and not info.whole_rows and info.top_k


@pytest.mark.parametrize("method,budget", [("safe", 24), ("unite", 12)])
def test_server_members_give_the_in_process_text_and_decisions(llama_pool, servers, method, budget):
    """The same tokens and decisions as in process. llama.cpp's CPU kernels give a row other bits in passes of 1-7
    tokens than in longer ones (``ensemble.members.llamacpp.SHARED_PASS``), and a server batches as it likes, so a
    near tie may go the other way (:func:`server_parity.assert_same_runs` allows it after 10 tokens, where the
    probabilities both sides read agree within 0.05)."""
    remote = members(llama_pool, servers)
    local = llama_pool.get_many(list(servers), models.quiet_progress)
    assert [m.info["top_k"] for m in remote] == [20, 20]
    assert_same_runs(local, remote, method, budget)


def test_a_run_that_reads_whole_rows_is_refused_before_it_starts(llama_pool, servers):
    with pytest.raises(InputError, match=r"top 20 log-probabilities.*temperature 0"):
        EnsembleRun(members(llama_pool, servers), QUESTIONS[0], "safe", Settings(max_new_tokens=8, temperature=0.7))


class _Failing(BaseHTTPRequestHandler):
    """Answers every completion with 503 (a server in trouble)."""

    def do_POST(self):
        body = json.dumps({"error": {"message": "engine overloaded"}}).encode()
        self.send_response(503)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_a_failing_or_dead_server_ends_the_run_with_its_name_and_the_trace_so_far(llama_pool, servers):
    fake = ThreadingHTTPServer(("127.0.0.1", 0), _Failing)
    threading.Thread(target=fake.serve_forever, daemon=True).start()
    proc, url = start_server("smollm2")
    try:
        qwen = llama_pool.get(f"qwen={servers['qwen']}", models.quiet_progress)
        smol = models.load(f"smollm2={url}", progress=models.quiet_progress)
        # a 5xx answer: the run ends at once, the message names the server and carries its reason
        broken = models.load(f"smollm2={url}", progress=models.quiet_progress)
        broken.model.url = f"http://127.0.0.1:{fake.server_address[1]}/v1"
        run = EnsembleRun([qwen, broken], QUESTIONS[0], "safe", Settings(max_new_tokens=16))
        with pytest.raises(ServerError, match=rf"{broken.model.url}\) answered 503: engine overloaded"):
            list(run.events())
        assert run.trace.stats.stop_reason == "member_failed"
        # a server killed mid-run: the tokens committed so far stay, and the message names it
        run = EnsembleRun([qwen, smol], QUESTIONS[1], "safe", Settings(max_new_tokens=48))
        events = run.events()
        started = time.monotonic()
        with pytest.raises(ServerError, match=rf"{url}\) could not be reached"):
            for event in events:
                if getattr(event, "record", None) is not None and proc.poll() is None:
                    proc.kill()
                    proc.wait()
        assert time.monotonic() - started < 60
        assert run.trace.stats.stop_reason == "member_failed" and url in run.trace.error
        assert run.trace.tokens and run.trace.text
    finally:
        fake.shutdown()
        if proc.poll() is None:
            proc.kill()
