"""The app's API for scripts (gradio_client) and its streaming protocol, against the running app."""

from __future__ import annotations

import json
import time
import uuid

import httpx
import pytest
from gradio_client import Client

from ensemble.trace import RunTrace

pytestmark = pytest.mark.embedded


@pytest.fixture(scope="module")
def client(app_url):
    return Client(app_url, verbose=False)


def test_api_lists_exactly_the_two_endpoints(client):
    assert set(client.view_api(print_info=False, return_format="dict")["named_endpoints"]) == {"/run_ensemble", "/tokenize"}


def test_tokenize_endpoint(client):
    result = client.predict(text="Sofia went to Plovdiv in 1999.", models="smollm2,gemma3", api_name="/tokenize")
    assert [t["text"] for t in result["models"]["smollm2"]["tokens"][:3]] == ["S", "of", "ia"]
    assert result["models"]["gemma3"]["tokens"][0]["text"] == "Sofia"
    assert 0 < result["agreement"] < 100 and 5 in result["shared_boundaries"]


def test_run_ensemble_endpoint_returns_a_valid_trace(client):
    data = client.predict(
        prompt="Sofia went to Plovdiv in 1999. Where did Sofia go?",
        method="safe",
        models="smollm2,gemma3",
        settings={"max_new_tokens": 16, "lookahead": 4},
        api_name="/run_ensemble",
    )
    trace = RunTrace.from_dict(data)
    assert trace.method == "safe" and trace.models == ["smollm2", "gemma3"]
    assert trace.settings["lookahead"] == 4 and trace.text
    assert {t.decision for t in trace.tokens} <= {"consensus", "oov_blocked", "ensembled_kept", "ensembled_replaced", "drafter"}
    assert trace.stats.generated_tokens == len(trace.tokens)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"prompt": "   "}, "prompt is empty"),
        ({"settings": {"lookahead": 0}}, "lookahead"),
        ({"models": "qwen,nobody"}, "Unknown model"),
        ({"method": "magic"}, "Unknown method"),
        ({"settings": {"temperature": "hot"}}, "temperature"),
        ({"settings": {"typo_option": 1}}, "Unknown setting"),
    ],
)
def test_bad_requests_get_messages_and_the_app_keeps_serving(client, kwargs, message):
    call = {"prompt": "Hi", "method": "safe", "models": "smollm2,gemma3", "settings": {"max_new_tokens": 4}} | kwargs
    with pytest.raises(Exception) as err:
        client.predict(**call, api_name="/run_ensemble")
    assert message in str(err.value)
    assert client.predict(text="still here", models="smollm2", api_name="/tokenize")["models"]["smollm2"]["count"] > 0


def stream_strip_updates(app_url: str, prompt: str, method: str, models: list[str], max_new_tokens: int) -> list:
    """Call the Run button's event the way the browser does and collect the strip's streamed diffs."""
    root = app_url.rstrip("/")
    config = httpx.get(f"{root}/config").json()
    dep = next(d for d in config["dependencies"] if d.get("api_name") == "run_stream")
    session = uuid.uuid4().hex[:12]
    settings = [max_new_tokens, 0.0, 1.0, 0, 10, "auto", 0.1, 0.0, 5, "unite", 10, 0.5, "logprob"]
    body = {"data": [prompt, method, models, models[0], *settings], "fn_index": dep["id"],
            "trigger_id": dep["targets"][0][0], "session_hash": session, "event_data": None}
    assert httpx.post(f"{root}/gradio_api/queue/join", json=body).status_code == 200
    updates, started = [], time.perf_counter()
    with httpx.stream("GET", f"{root}/gradio_api/queue/data?session_hash={session}", timeout=600) as response:
        for line in response.iter_lines():
            if not line.startswith("data:"):
                continue
            message = json.loads(line[5:])
            if message.get("msg") == "process_generating":
                updates.append((time.perf_counter() - started, message["output"]["data"][0]))
            if message.get("msg") == "process_completed":
                assert message["success"], message
                final = message["output"]["data"][0]
                break
    return updates, final


def test_streaming_sends_only_new_tokens(app_url):
    """The strip grows by appends: no update re-sends what the browser already has."""
    updates, final = stream_strip_updates(app_url, "Count from one to twenty in words.", "single", ["smollm2"], 40)
    diffs = [d for _, d in updates if d]
    appends = [op for d in diffs for op in d if op[0] == "append"]
    assert len(appends) >= 3, "the strip should stream in several pieces"
    assert all(op[0] == "append" for d in diffs[1:] for op in d), diffs[:3]
    sent = sum(len(op[2]) for op in appends)
    assert sent <= len(final) + 10  # every byte of the strip is sent once
