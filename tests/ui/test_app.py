"""The app's API for scripts (gradio_client) and its streaming protocol, against the running app."""

from __future__ import annotations

import re

import pytest
from gradio_client import Client

from ensemble.trace import RunTrace

pytestmark = pytest.mark.embedded


@pytest.fixture(scope="module")
def client(app_url):
    return Client(app_url, verbose=False)


ENDPOINTS = {"run_ensemble", "tokenize", "fork", "explain_token", "explain_answers", "explain_run", "blame_answer"}


def test_api_lists_exactly_its_endpoints(client):
    assert set(client.view_api(print_info=False, return_format="dict")["named_endpoints"]) == {f"/{e}" for e in ENDPOINTS}


def test_agents_use_the_same_endpoints_as_mcp_tools(app_url):
    """An MCP client (the ``mcp`` package, streamable HTTP) lists typed, documented tools and calls them."""
    import ast
    import asyncio
    import concurrent.futures

    from mcp import ClientSession
    from mcp.client.streamable_http import streamablehttp_client

    async def session_calls():
        async with streamablehttp_client(app_url.rstrip("/") + "/gradio_api/mcp/") as (read, write, _), \
                ClientSession(read, write) as session:
            await session.initialize()
            tools = {t.name: t for t in (await session.list_tools()).tools}
            compared = await session.call_tool("tokenize", {"text": "Sofia went to Plovdiv", "models": "smollm2,gemma3"})
            ran = await session.call_tool("run_ensemble", {"prompt": "Sofia went to Plovdiv in 1999. Where did Sofia go?",
                                                           "method": "safe", "models": "smollm2,gemma3",
                                                           "settings": {"max_new_tokens": 12}})
            trace = ast.literal_eval(ran.content[0].text)  # Gradio sends a result object as its Python text
            why = await session.call_tool("explain_token", {"trace": trace, "index": 1})
            bad = await session.call_tool("explain_token", {"trace": trace, "index": 999})
            parted = await session.call_tool("explain_answers", {"trace_a": trace, "trace_b": trace, "label_a": "a", "label_b": "b"})
            return tools, compared, trace, why, bad, parted

    # in a thread of its own: Playwright's sync API (a session fixture) may hold this thread's running event loop
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        tools, compared, trace, why, bad, parted = pool.submit(asyncio.run, session_calls()).result()
    assert set(tools) == ENDPOINTS
    assert "prompt" in tools["run_ensemble"].inputSchema["properties"] and tools["run_ensemble"].description
    assert "index" in tools["explain_token"].inputSchema["properties"]
    assert tools["tokenize"].inputSchema["properties"]["text"]["description"]
    assert ast.literal_eval(compared.content[0].text)["models"]["smollm2"]["tokens"][0]["text"] == "S"
    RunTrace.from_dict(trace)
    answer = ast.literal_eval(why.content[0].text)
    assert answer["index"] == 1 and answer["decision"] == trace["tokens"][1]["decision"] and len(answer["explanation"]) > 20
    assert not re.search(r"</?(p|b|code|span|div)\b", answer["explanation"])  # plain text, not the inspector's HTML
    assert bad.isError and "is not in this trace" in bad.content[0].text
    assert ast.literal_eval(parted.content[0].text)["summary"] == ["Both answers are the same text."]


def test_fork_endpoint_continues_a_trace_and_compares(client):
    data = client.predict(prompt="Sofia went to Plovdiv in 1999. Where did Sofia go?", method="safe", models="smollm2,gemma3",
                          settings={"max_new_tokens": 16}, api_name="/run_ensemble")
    result = client.predict(trace=data, at=3, method="drafter", api_name="/fork")
    forked = RunTrace.from_dict(result["fork"])
    parent = RunTrace.from_dict(data)
    assert forked.models == ["smollm2"] and forked.fork["at"] == 3 and forked.fork["method"] == "safe"
    assert result["comparison"]["original"] == parent.text[parent.tokens[3].start:]
    assert forked.text[forked.fork["chars"]:] == result["comparison"]["forked"]
    with pytest.raises(Exception, match="is not in this run"):
        client.predict(trace=data, at=999, method="drafter", api_name="/fork")
    with pytest.raises(Exception, match=r"schema_version|trace"):
        client.predict(trace={"nonsense": 1}, at=0, method="drafter", api_name="/fork")


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


def test_streaming_sends_only_new_tokens(app_url):
    """The strip grows by appends: no update re-sends what the browser already has."""
    from scripts.app_latency import press_run

    run = press_run(app_url.rstrip("/"), "single", ["smollm2"], 40, prompt="Count from one to twenty in words.")
    appends = [op for d in run["diffs"] for op in d if op[0] == "append"]
    assert len(appends) >= 3, "the strip should stream in several pieces"
    assert all(op[0] == "append" for d in run["diffs"][1:] for op in d), run["diffs"][:3]
    assert sum(len(op[2]) for op in appends) <= len(run["final"]) + 10  # every byte of the strip is sent once


def test_specem_shows_each_draft_before_its_round_commits(app_url):
    """A SpecEM segment needs every model's draft and the vote; the drafts appear in the status meanwhile."""
    from scripts.app_latency import press_run

    run = press_run(app_url.rstrip("/"), "specem", ["smollm2", "gemma3"], 12, prompt="Name three colours <b>now</b>.")
    assert run["first_draft_s"] is not None and run["first_token_s"] is not None
    assert run["first_draft_s"] < run["first_token_s"]


def test_results_view_opens_an_evaluation_summary(tmp_path):
    from ensemble.evaluation import SUMMARY_FIELDS
    from ui import config
    from ui import results as results_ui

    rows = [
        ["single:qwen", 60, 21, 0.35, 0.24, 0.48, 0.0, 9.1, 24.0, 0.0, 180.0, 0.02, 0.5, 0.0, 0.0],
        ["safe-unite", 60, 24, 0.40, 0.29, 0.53, 0.04, 7.0, 31.0, 0.0, 185.0, 0.3, 0.55, 2.5, 9.0],
    ]
    path = tmp_path / "summary.csv"
    path.write_text(",".join(SUMMARY_FIELDS) + "\n" + "\n".join(",".join(map(str, r)) for r in rows) + "\n")
    html, scatter, bars = results_ui.show_summary(str(path))
    assert "safe-unite" in html and "single:qwen" in html and "phrase-loop rate" in html and ">0.300<" in html
    assert scatter is not None and bars is not None
    html, scatter, bars = results_ui.show_summary(str(config.COMMITTED_RESULTS))  # the run docs/results.md describes
    assert all(m in html for m in ("single:qwen", "unite", "safe-gac", "specem")) and scatter is not None
    bad = tmp_path / "bad.csv"
    bad.write_text("not,a,summary\n1,2,3\n")
    html, scatter, bars = results_ui.show_summary(str(bad))
    assert "el-error" in html and scatter is None
