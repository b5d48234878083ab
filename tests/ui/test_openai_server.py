"""The ensemble as an OpenAI-compatible server, read by the official ``openai`` client: on the app's server (the
session's app, its /v1 routes) and as ``python -m ensemble serve``'s own app; answers equal ``generate``'s, streams
join to the same text, bad requests get OpenAI's error JSON, and each answer's trace link replays it in the app."""

from __future__ import annotations

import json
import threading
import types

import httpx
import openai
import pytest

from ensemble import cli
from tests.conftest import ROOT, free_port

pytestmark = pytest.mark.embedded
PROMPT = "What is 2+3?"
TOKENS = 8


@pytest.fixture(scope="module")
def client(app_url, tmp_path_factory):
    from ui import openai_routes

    openai_routes.STORE.folder = tmp_path_factory.mktemp("served-traces")  # not the user's cache
    return openai.OpenAI(base_url=app_url + "v1", api_key="unused", max_retries=0, timeout=300)


def generated(monkeypatch, capsys, pool, *args: str) -> str:
    """The text ``python -m ensemble generate ... --json`` writes, on the session's loaded models."""
    import ensemble.models

    monkeypatch.setattr(ensemble.models, "ModelPool", lambda **_: pool)
    capsys.readouterr()
    assert cli.main(["generate", "--prompt", PROMPT, "--max-new-tokens", str(TOKENS), "--backend", "local", "--json", *args]) == 0
    return json.loads(capsys.readouterr().out)["text"]


def test_completions_give_generates_text_and_link_their_trace(client, app_url, pool, monkeypatch, capsys):
    answer = client.completions.create(model="single:qwen", prompt=PROMPT, max_tokens=TOKENS)
    assert answer.choices[0].text == generated(monkeypatch, capsys, pool, "--method", "single", "--models", "qwen")
    assert answer.usage.completion_tokens <= TOKENS and answer.choices[0].finish_reason in ("stop", "length")
    trace_id = answer.model_extra["trace_id"]
    assert answer.model_extra["trace_url"] == f"{app_url}?trace={trace_id}"
    stored = httpx.get(f"{app_url}v1/traces/{trace_id}").json()
    assert stored["text"] == answer.choices[0].text and stored["method"] == "single"


def test_a_chat_stream_joins_to_the_ensembles_answer(client, pool, monkeypatch, capsys):
    model, messages = "safe-unite@qwen+smollm2", [{"role": "user", "content": PROMPT}]
    whole = client.chat.completions.create(model=model, messages=messages, max_tokens=TOKENS)
    chunks = list(client.chat.completions.create(model=model, messages=messages, max_tokens=TOKENS, stream=True))
    joined = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    text = generated(monkeypatch, capsys, pool, "--method", "safe", "--models", "qwen,smollm2", "--fusion", "unite")
    assert joined == whole.choices[0].message.content == text and text
    assert chunks[-1].choices[0].finish_reason in ("stop", "length") and len({c.model_extra["trace_id"] for c in chunks}) == 1


@pytest.mark.parametrize(("kwargs", "error", "param"), [
    ({"model": "nosuch", "prompt": "x"}, openai.NotFoundError, "model"),
    ({"model": "single:nosuch", "prompt": "x"}, openai.NotFoundError, "model"),
    ({"model": "single:qwen", "prompt": "x", "temperature": -1}, openai.BadRequestError, None),
    ({"model": "single:qwen", "prompt": "x", "logprobs": 1}, openai.BadRequestError, "logprobs"),
    ({"model": "single:qwen", "prompt": "x", "n": 3}, openai.BadRequestError, "n"),
])
def test_bad_models_and_settings_get_openai_errors(client, kwargs, error, param):
    with pytest.raises(error) as refused:
        client.completions.create(**kwargs)
    body = refused.value.body
    assert body["type"] == "invalid_request_error" and body["param"] == param
    assert "Traceback" not in body["message"] and str(ROOT) not in body["message"]


def test_a_body_that_is_not_json_is_an_openai_error(app_url, client):
    answer = httpx.post(f"{app_url}v1/completions", content=b"{not json", headers={"content-type": "application/json"})
    assert answer.status_code == 400 and answer.json()["error"]["message"] == "The request body is not valid JSON."


def test_the_trace_link_opens_the_answer_in_the_run_tab(client, app_url):
    from ui import replay

    answer = client.completions.create(model="single:qwen", prompt=PROMPT, max_tokens=TOKENS)
    link = answer.model_extra["trace_url"]
    assert httpx.get(link).status_code == 200  # the app's page; its load event replays the trace:
    query = dict(httpx.URL(link).params)
    request = types.SimpleNamespace(query_params=query, session_hash="link-" + query["trace"])
    view, inspected = replay.first_view(request)
    assert "Replaying the single run of" in view.status and 'el-selected" data-i="0"' in view.strip
    first = answer.choices[0].text.split()[0]
    assert first in view.strip and inspected.explanation
    gone = types.SimpleNamespace(query_params={"trace": "../../etc/passwd"}, session_hash="link-bad")
    assert "Replaying the single" not in (replay.first_view(gone)[0].status or "")  # the first example, as without a link


def test_ensemble_serve_answers_on_its_own_app(pool, tmp_path):
    import uvicorn

    from ensemble.cli import parser, serve

    args = parser.build_parser().parse_args(["serve", "--traces", str(tmp_path), "--models", "qwen,smollm2",
                                             "--app-url", "http://lens.example:7860/", "--backend", "local"])
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(serve.build_app(args, pool=pool), port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        local = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=3, timeout=300)
        ids = [m.id for m in local.models.list()]
        assert "single:qwen" in ids and "safe-unite@qwen+smollm2" in ids and "single:gemma3" not in ids
        answer = local.completions.create(model="single:qwen", prompt=PROMPT, max_tokens=4, stream=True)
        chunks = list(answer)
        assert chunks[0].model_extra["trace_url"].startswith("http://lens.example:7860/?trace=")
        assert len(list(tmp_path.iterdir())) == 1
        with pytest.raises(openai.NotFoundError):  # offered here: qwen and smollm2 only
            local.completions.create(model="single:gemma3", prompt=PROMPT, max_tokens=4)
    finally:
        server.should_exit = True
        thread.join(10)


def test_the_apps_v1_routes_can_be_turned_off(monkeypatch):
    """``ENSEMBLE_LENS_OPENAI=0`` (read once into ``config.OPENAI_ROUTES``): the app's server gets no /v1 routes."""
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    from ui import config, openai_routes

    monkeypatch.setattr(config, "OPENAI_ROUTES", False)
    off = FastAPI()
    assert openai_routes.add_to(off) is False and TestClient(off).get("/v1/models").status_code == 404
    monkeypatch.setattr(config, "OPENAI_ROUTES", True)
    on = FastAPI()
    assert openai_routes.add_to(on) is True
    listed = TestClient(on).get("/v1/models")
    assert listed.status_code == 200 and "safe-unite@qwen+smollm2" in {m["id"] for m in listed.json()["data"]}
