"""``ensemble serve``'s parts that need no model: the bounded trace store, the one-at-a-time slots, the reading of
OpenAI requests, and the local GSM8K task's data for lm-eval (tests/ui/test_openai_server.py runs the server)."""

from __future__ import annotations

import json
import threading
import time

import pytest

from ensemble.errors import ModelLoadError
from ensemble.serving.protocol import ApiError, model_ids, parse_request
from ensemble.serving.routes import Slots
from ensemble.serving.store import TraceStore, new_id
from ensemble.trace import RunTrace
from tests.conftest import ROOT


def test_the_store_keeps_the_newest_traces_within_its_count_and_refuses_ids_that_are_paths(tmp_path):
    store = TraceStore(tmp_path / "traces", max_count=2)
    ids = []
    for i in range(3):
        ids.append(new_id())
        store.save(RunTrace(method="single", models=["qwen"], settings={}, prompt=f"question {i}"), ids[-1])
        time.sleep(0.01)
    assert store.read(ids[0]) is None and store.read(ids[2]).prompt == "question 2"
    assert len(list((tmp_path / "traces").iterdir())) == 2
    for bad in ("../x", ids[1] + "/..", "/etc/passwd", "", None):
        assert store.path(bad) is None and store.read(bad) is None


def test_the_store_keeps_within_its_size(tmp_path):
    store = TraceStore(tmp_path, max_count=100, max_mb=0.003)  # 3 kB: room for one trace of 2 kB
    for _ in range(3):
        store.save(RunTrace(method="single", models=["qwen"], settings={}, prompt="x" * 2000), new_id())
    assert len(list(tmp_path.iterdir())) == 1


def test_one_run_at_a_time_and_a_request_past_the_waiting_ones_is_refused_at_once():
    slots = Slots(max_waiting=1)
    slots.acquire()  # runs
    got = threading.Event()
    waiter = threading.Thread(target=lambda: (slots.acquire(), got.set()))
    waiter.start()
    deadline = time.monotonic() + 5
    while slots._queued < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not got.is_set()  # waits its turn
    with pytest.raises(ApiError) as refused:
        slots.acquire()
    assert refused.value.status == 429 and refused.value.body()["error"]["type"] == "rate_limit_error"
    slots.release()
    waiter.join(5)
    assert got.is_set()
    slots.release()


def test_requests_map_to_the_engine_settings_and_what_cannot_be_honoured_is_refused():
    ask = parse_request({"model": "safe-gac@qwen=2+smollm2", "prompt": "Hi", "max_tokens": 7, "temperature": 0.5,
                         "top_p": 0.9, "seed": 3, "stop": "\n\n", "user": "ignored", "ensemble": {"lookahead": 3}}, chat=False)
    s = ask.settings
    assert (s.max_new_tokens, s.temperature, s.top_p, s.seed, s.stop_strings, s.lookahead) == (7, 0.5, 0.9, 3, ["\n\n"], 3)
    assert (ask.spec.method, ask.spec.members, s.fusion, s.weights) == ("safe", ("qwen", "smollm2"), "gac", {"qwen": 2.0})
    assert parse_request({"model": "single@qwen", "messages": [{"role": "user", "content": "Hi"}]}, chat=True).spec.model == "qwen"
    for body, param in (({"model": "nosuch", "prompt": "x"}, "model"), ({"model": "single:qwen", "prompt": "x", "n": 2}, "n"),
                        ({"model": "single:qwen", "prompt": "x", "logprobs": 2}, "logprobs"),
                        ({"model": "single:qwen", "prompt": "x", "echo": True}, "echo"),
                        ({"model": "single:qwen", "prompt": [1, 2]}, "prompt"),
                        ({"model": "single:qwen", "prompt": "x", "max_tokens": "many"}, "max_tokens"),
                        ({"model": "single:qwen", "prompt": "x", "stop": ["a"] * 5}, "stop")):
        with pytest.raises(ApiError) as refused:
            parse_request(body, chat=False)
        assert refused.value.param == param and refused.value.status in (400, 404)
    with pytest.raises(ApiError, match="exactly one message"):
        parse_request({"model": "single:qwen", "messages": [{"role": "system", "content": "s"},
                                                            {"role": "user", "content": "u"}]}, chat=True)
    assert "safe-unite@qwen+smollm2" in model_ids(["qwen", "smollm2", "gemma3"])
    assert "single:gemma3" in model_ids(["qwen", "smollm2", "gemma3"])


def test_the_lm_eval_task_holds_the_questions_evaluate_picks():
    from scripts.lm_eval.make_data import rows

    shipped = [json.loads(line) for line in (ROOT / "scripts" / "lm_eval" / "gsm8k-20.jsonl").read_text().splitlines()]
    assert shipped == rows() and len(shipped) == 20
    committed = {json.loads(line)["qid"] for line in (ROOT / "docs/results/gsm8k-60-traced/rows.jsonl").open()}
    assert {r["qid"] for r in shipped} <= committed  # the same questions as the committed run's


def test_serve_flags_bound_the_store_and_the_queue_and_bad_ones_are_one_line(tmp_path, capsys):
    import types

    from ensemble.cli import main, parser, serve

    args = parser.build_parser().parse_args(["serve", "--traces", str(tmp_path), "--max-traces", "3", "--max-traces-mb",
                                             "1.5", "--max-waiting", "2", "--models", "qwen"])
    engine = serve.build_app(args, pool=types.SimpleNamespace(get_many=list)).state.engine
    assert (engine.store.folder, engine.store.max_count, engine.store.max_bytes) == (tmp_path, 3, 1_500_000)
    assert engine.slots.max_waiting == 2 and engine.offered == ["qwen"]
    assert main(["serve", "--max-traces", "0"]) == 2  # refused before any model loads or any port opens
    err = capsys.readouterr().err
    assert err.startswith("error: --max-traces must be at least 1") and "Traceback" not in err


@pytest.mark.parametrize(("failure", "status", "kind"), [
    (OSError(2, "No such file", "/srv/secret/model.gguf"), 500, "server_error"),
    (ModelLoadError("qwen could not be loaded: its cache is incomplete; run prepare."), 503, "server_error"),
])
def test_a_run_that_cannot_start_is_an_openai_error_without_server_paths(tmp_path, failure, status, kind):
    import types

    from starlette.testclient import TestClient

    from ensemble.cli import parser, serve

    def get_many(names):
        raise failure

    args = parser.build_parser().parse_args(["serve", "--traces", str(tmp_path), "--models", "qwen"])
    with TestClient(serve.build_app(args, pool=types.SimpleNamespace(get_many=get_many))) as web:
        answer = web.post("/v1/completions", json={"model": "single:qwen", "prompt": "Hi", "max_tokens": 2})
        assert answer.status_code == status and answer.json()["error"]["type"] == kind
        assert "/srv" not in answer.text and "Traceback" not in answer.text
        again = web.post("/v1/completions", json={"model": "single:qwen", "prompt": "Hi", "max_tokens": 2})
        assert again.status_code == status  # the slot was given back: the next request is not left waiting


LONG_ANSWER = "Write the numbers from one to five hundred in words, one a line, with no code and no gaps."


@pytest.mark.embedded
def test_a_stopped_server_ends_its_run_in_flight_and_answers_before_it_goes(tmp_path):
    """``kill`` (SIGTERM) while a long non-streamed completion runs: the run ends at its next token, its client gets
    an answer (the text so far, or 503 had it not started), and the server exits at once instead of finishing it."""
    import signal
    import subprocess
    import sys

    import httpx

    from tests.conftest import free_port

    port = free_port()
    log = tmp_path / "serve.log"
    with log.open("w") as out:
        server = subprocess.Popen([sys.executable, "-m", "ensemble", "serve", "--port", str(port), "--models", "qwen",
                                   "--backend", "local", "--traces", str(tmp_path / "traces")],
                                  cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}/v1"
    try:
        for _ in range(240):
            try:
                if httpx.get(base + "/models", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.5)
        answers = []
        asking = threading.Thread(target=lambda: answers.append(httpx.post(
            base + "/completions", timeout=600,
            json={"model": "single:qwen", "prompt": LONG_ANSWER, "max_tokens": 2000})))
        asking.start()
        for _ in range(120):  # the run is in flight once qwen has loaded
            if "qwen: ready" in log.read_text() or not asking.is_alive():
                break
            time.sleep(0.5)
        time.sleep(1)
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=60)  # 2000 tokens take minutes: finishing the run first would time out here
        asking.join(30)
        assert answers, log.read_text()[-2000:]
        answer = answers[0]
        assert answer.status_code in (200, 503), answer.text
        if answer.status_code == 503:  # stopped before its run began
            assert answer.json()["error"]["code"] == "shutting_down"
            return
        assert answer.json()["choices"][0]["text"]
        trace = RunTrace.from_json((tmp_path / "traces" / f"{answer.json()['trace_id']}.json").read_text())
        assert trace.stats.stop_reason == "cancelled", trace.stats.stop_reason  # not run to its end, then answered
    finally:
        if server.poll() is None:
            server.kill()
