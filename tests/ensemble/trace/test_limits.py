"""Uploaded traces cannot hold the server: reading is linear and time-limited, sizes and value domains are bounded
before any record is built, text is cleaned once, the API reads its arguments as meant, and the sessions keep a
bounded amount of memory (issue 26)."""

from __future__ import annotations

import copy
import json
import threading
import time
from pathlib import Path

import pytest

from ensemble.errors import TraceFormatError
from ensemble.trace import RunTrace
from ensemble.trace.read import read_trace
from ensemble.trace.values import MAX_PAIRS
from tests.conftest import FIXTURES
from ui.sessions import Sessions, trace_bytes

VALID = {name: json.loads((FIXTURES / f"{name}.json").read_text(encoding="utf-8"))
         for name in ["single", "safe", "safe_math", "specem"]}


class Request:
    def __init__(self, session: str = "trace-limits"):
        self.session_hash = session


def refused(data) -> str:
    with pytest.raises(TraceFormatError) as err:
        RunTrace.from_json(data if isinstance(data, str) else json.dumps(data))
    message = str(err.value)
    assert message and "\n" not in message and len(message) < 400
    return message


def escaped_quotes(size: int) -> str:
    """The issue's file: a quote, then escaped quotes (the old scan re-read the rest from each: 40 KB took 7 s)."""
    return '"' + '\\"' * (size // 2)


def heavy_pairs(n: int) -> dict:
    """The safe_math trace with ``n`` top-k pairs in one token (the issue's: 900,000 in 18 MB took 36 s)."""
    data = copy.deepcopy(VALID["safe_math"])
    data["tokens"][3]["topk"] = [[f"key{i}", 0.000001] for i in range(n)]
    return data


# -- Deliver 1: linear, bounded, off the caller's thread, time-limited --------------------------------------------
@pytest.mark.parametrize("size", [60_000, 1_000_000])
@pytest.mark.timing
def test_escaped_quotes_are_refused_in_well_under_a_second(size):
    started = time.perf_counter()
    assert "not valid JSON" in refused(escaped_quotes(size))
    assert time.perf_counter() - started < 2  # generous (CI machines vary); the old scan took > 7 s at 40 KB


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('"\\\\"' + "[" * 40 + "]" * 40, "nests deeper than 32"),  # an escaped backslash ends no string early
        ('["\\"' + "[" * 40 + '"]', None),  # brackets inside a string with an escaped quote are text, not nesting
        ('["\\\\\\"[[[["]', None),
        ("[" + "[]," * 1_100_000 + "[]]", "more than 1,000,000 lists and objects"),
        ("[" + "1," * 4_100_000 + "1]", "more than 4,000,000 values"),
    ],
)
def test_the_scan_reads_strings_as_json_does(text, message):
    from ensemble.trace import check as trace_check

    if message is None:
        assert isinstance(trace_check.parse(text), list)
    else:
        with pytest.raises(TraceFormatError, match=message):
            trace_check.parse(text)


def test_a_huge_top_k_list_is_refused_before_any_record_is_built():
    data = heavy_pairs(MAX_PAIRS + 1)
    assert f"trace.tokens[3].topk has {MAX_PAIRS + 1:,} entries" in refused(data)
    data["tokens"][3]["topk"] = data["tokens"][3]["topk"][:MAX_PAIRS]
    RunTrace.from_json(json.dumps(data))  # at the bound: read
    data["tokens"][3]["details"]["extra_blob"] = "x" * 1_100_000
    assert "trace.tokens[3] is 1,1" in refused(data) and "characters of JSON" in refused(data)


@pytest.mark.parametrize("shape", ["pairs", "numbers", "object"])
def test_a_huge_list_in_one_record_is_refused_by_the_scan_before_parsing(monkeypatch, shape):
    from ensemble.trace import check as trace_check

    data = heavy_pairs(1)
    many = 120_000  # over 1.3 MB of lists and numbers outside strings in one token: more than a whole record may hold
    data["tokens"][3]["topk"] = {"pairs": [[f"k{i}", 1e-7] for i in range(many)], "numbers": list(range(many * 2)),
                                 "object": {f"k{i}": 1e-7 for i in range(many)}}[shape]
    text = json.dumps(data)

    def never(*args, **kwargs):
        raise AssertionError("parsed: the scan let it through")

    monkeypatch.setattr(trace_check.json, "loads", never)
    with pytest.raises(TraceFormatError, match=f"inside one record; a record holds at most 1,000,000 .a top-k list at most {MAX_PAIRS:,}"):
        trace_check.parse(text)


@pytest.mark.timing
def test_explain_token_answers_a_huge_token_at_once_with_one_line():
    import gradio as gr

    from ui import api

    started = time.perf_counter()
    with pytest.raises(gr.Error) as err:
        api.explain_token(heavy_pairs(200_000), 3)
    assert "holds at most" in err.value.message and "\n" not in err.value.message
    assert time.perf_counter() - started < 20  # the issue measured 36 s for 900,000 pairs; parsing 4 MB is the cost


@pytest.mark.timing
def test_reading_past_its_time_limit_is_refused_and_the_reader_stops():
    data = copy.deepcopy(VALID["safe_math"])
    with pytest.raises(TraceFormatError, match=r"took more than 0.001 s, so the server gave up on it"):
        read_trace(json.dumps(data), limit_s=0.001)
    started = time.perf_counter()
    assert read_trace(data).method == "safe"  # the readers are free again (the first stopped at a checkpoint)
    assert time.perf_counter() - started < 10


@pytest.mark.concurrency
@pytest.mark.timing
def test_a_page_load_answers_while_heavy_traces_are_read(tmp_path):
    """While a handler thread reads the adversarial file and a heavy one, the server goes on serving: its event
    loop never waits long for the interpreter (the old scan held it for the whole 60 KB file, 10-16 s, so every
    page load waited that long). Measured as the longest gap of a thread that ticks every millisecond, which does
    not depend on how fast the machine serves a page; the page loads meanwhile must all succeed."""
    import httpx

    import app
    from tests.conftest import free_port
    from ui import replay

    files = []
    for name, text in [("escapes.json", escaped_quotes(60_000)), ("escapes-1mb.json", escaped_quotes(1_000_000)),
                       ("heavy.json", json.dumps(heavy_pairs(60_000)))]:
        (path := tmp_path / name).write_text(text, encoding="utf-8")
        files.append(path)
    demo = app.build_app()
    port = free_port()
    demo.launch(server_port=port, prevent_thread_lock=True, quiet=True)
    try:
        url = f"http://127.0.0.1:{port}/"
        httpx.get(url, timeout=120)  # the first page load builds what Gradio caches
        done, gaps = threading.Event(), [0.0]

        def tick():
            last = time.perf_counter()
            while not done.is_set():
                time.sleep(0.001)
                now = time.perf_counter()
                gaps.append(now - last)
                last = now

        def upload():
            for path in files:
                _, status, *_ = replay.import_trace(str(path), Request("heavy-reader"))
                assert "Could not load the trace" in status
            done.set()

        threads = [threading.Thread(target=tick), threading.Thread(target=upload)]
        for thread in threads:
            thread.start()
        pages = 0
        while not done.is_set() or not pages:
            assert httpx.get(url, timeout=120).status_code == 200
            pages += 1
        for thread in threads:
            thread.join()
        # A "does not hang" bound: on a 2-core machine shared with a dozen busy processes the gaps were 1.9-9 s
        # (scheduling, garbage collection); the old scan held the interpreter 10-16 s for 60 KB and over an hour for
        # the 1 MB file.
        assert max(gaps) < 30, f"the interpreter was held for {max(gaps):.1f} s"
    finally:
        demo.close()


# -- Deliver 6: every value checked against its domain ----------------------------------------------------------
def _changed(name, change):
    data = copy.deepcopy(VALID[name])
    change(data)
    return data


@pytest.mark.parametrize(
    ("name", "change", "message"),
    [
        ("safe", lambda d: d["tokens"][3]["topk"][0].__setitem__(1, -999999999), "is -1e+09; a probability lies between"),
        ("safe", lambda d: d["tokens"][3]["topk"][0].__setitem__(1, 1e15), "is 1e+15; a probability"),
        ("safe", lambda d: d["tokens"][3]["details"].update(mean_prob=1.5), "details.mean_prob is 1.5"),
        ("safe", lambda d: d["tokens"][3]["details"]["probs"].update(qwen=-0.1), "details.probs['qwen'] is -0.1"),
        ("safe", lambda d: d["tokens"][3]["details"]["per_model_top"]["qwen"][0].__setitem__(1, 2),
         "per_model_top['qwen'][0]'s probability is 2"),
        ("safe", lambda d: d["tokens"][3]["details"].update(boundary=10**6), "boundary 1e+06 is not a place in the text"),
        ("safe", lambda d: d["tokens"][1]["details"].update(blocked_by=[["k", 0.5]]), "details.blocked_by must be a list of model names"),
        ("safe", lambda d: d.update(schema_version=2.0), "schema_version must be a whole number (1 to 2), not 2.0"),
        ("safe", lambda d: d.update(schema_version="2"), 'not "2"'),
        ("safe", lambda d: d["stats"].update(latency_s=-3), "trace.stats.latency_s is -3"),
        ("safe", lambda d: d["stats"]["forward_passes"].update(qwen=-1), "forward_passes['qwen'] is -1"),
        ("specem", lambda d: d["rounds"][0].update(candidates=[], scores=[], aggregate=[], winner_index=None),
         "winner 'smollm2' is not one of the round's candidates (it has no candidates)"),
        ("specem", lambda d: d["rounds"][0].update(winner_index=0), "winner_index 0 is 'qwen''s candidate"),
        ("specem", lambda d: d["rounds"][0]["rewards"].update(qwen=7), "rewards['qwen'] is 7"),
        ("specem", lambda d: d["rounds"][0]["weights_after"].update(qwen=-0.5), "weights_after['qwen'] is -0.5"),
        ("specem", lambda d: d["rounds"][0].update(start=10**6), "start 1000000 is not a place in the text"),
        ("single", lambda d: d.pop("schema_version"), "This JSON is not an Ensemble Lens trace (it has no schema_version)"),
    ],
)
def test_values_outside_their_domain_are_refused(name, change, message):
    assert message in refused(_changed(name, change))


def test_json_that_is_not_a_trace_says_so():
    assert "not an Ensemble Lens trace" in refused({"hello": "world"})
    assert "not an Ensemble Lens trace" in refused({"data": [1, 2, 3], "version": 2})


# -- Deliver 2: text cleaned once at the door ------------------------------------------------------------------
def _with_surrogates(where: str) -> dict:
    data = copy.deepcopy(VALID["safe"])
    if where == "token":
        tok = data["tokens"][3]
        data["text"] = data["text"][: tok["start"]] + " w\ud800nt" + data["text"][tok["end"] :]
        tok["text"] = " w\ud800nt"
    elif where == "prompt":
        data["prompt"] = "Sofia \udfff and \ud83d"
    elif where == "model":
        data = json.loads(json.dumps(data).replace('"gemma3"', '"gemma\\ud800"'))  # every place that names it
    else:  # a top-k key
        data["tokens"][3]["topk"][1][0] = "\udc80's"
        data["tokens"][3]["details"]["per_model_top"]["qwen"][1][0] = "\ud800"
    return data


@pytest.mark.parametrize("where", ["token", "prompt", "model", "topk"])
def test_lone_surrogates_are_replaced_once_with_a_warning_and_every_view_renders(where, tmp_path):
    from tests.ensemble.trace.test_import import render_everything
    from ui import api

    data = _with_surrogates(where)
    for text in (json.dumps(data), json.dumps(data, ensure_ascii=False)):  # escaped, and raw characters
        trace = RunTrace.from_json(text)
        assert any("lone UTF-16 surrogates" in w for w in trace.warnings)
        assert "\ufffd" in trace.to_json()
        trace.to_json().encode("utf-8")  # valid text everywhere: encodes without an error
        render_everything(trace)
    answer = api.explain_token(data, 3)  # the API answers with valid text too
    json.dumps(answer, ensure_ascii=False).encode("utf-8")
    assert RunTrace.from_json(json.dumps(VALID["safe"])).warnings == []  # clean traces get no warning


# -- Deliver 10/11: API arguments and messages in the user's terms ------------------------------------------------
def test_explain_token_takes_a_token_number_as_text():
    import gradio as gr

    from ui import api

    trace = VALID["safe"]
    assert api.explain_token(trace, "1")["index"] == 1 == api.explain_token(json.dumps(trace), 1)["index"]
    for index, message in [("x", 'index must be a token number (0 is the answer\'s first token), not "x"'),
                           (99, "Token #99 is not in this trace: it has tokens #0 to #15."), (True, "not true")]:
        with pytest.raises(gr.Error) as err:
            api.explain_token(trace, index)
        assert message in err.value.message


def test_fork_and_run_arguments_say_what_to_fix():
    import gradio as gr

    from ui import api

    with pytest.raises(gr.Error) as err:
        api.fork(VALID["safe"], "x")
    assert err.value.message == 'at must be a token number (0 is the answer\'s first token), not "x".'

    with pytest.raises(gr.Error) as err:
        api.run_ensemble("hi", "single", "smollm2", settings="not json")
    assert err.value.message.startswith('settings must be a JSON object of engine options, such as {"max_new_tokens": 64}')
    assert "Expecting value" not in err.value.message and "line 1 column 1" not in err.value.message
    with pytest.raises(gr.Error) as err:
        api.run_ensemble("hi", "single", "smollm2", settings="[1]")
    assert err.value.message.endswith("not a list.")


def test_a_malformed_results_csv_is_named_by_its_file_not_the_servers_path(tmp_path):
    from ui import results as results_ui

    folder = tmp_path / "gradio-upload-3f9a1c"
    folder.mkdir()
    (path := folder / "my-summary.csv").write_text("method,accuracy\nsafe,not-a-number\n", encoding="utf-8")
    html = results_ui.show_summary(str(path)).results_view
    assert "my-summary.csv" in html and str(folder) not in html and "gradio-upload" not in html


# -- Deliver 3: sessions keep a bounded amount of memory -------------------------------------------------------
def test_sessions_drop_the_least_recently_used_past_their_byte_budget():
    traces = [RunTrace.from_json(json.dumps(heavy_pairs(2_000))) for _ in range(6)]
    each = trace_bytes(traces[0])
    assert each > 2_000 * 180
    store = Sessions(budget_bytes=int(each * 3.5))
    shared = RunTrace.from_json(json.dumps(VALID["single"]))
    busy = store.get("busy")
    busy.trace, busy.busy = traces[0], 1  # a session still streaming is never dropped
    for i, trace in enumerate(traces[1:], 1):
        entry = store.get(f"s{i}")
        entry.trace, entry.imported, entry.selected = trace, trace, (trace, 2)  # held thrice, counted once
        entry.compare = {"single": shared}  # shared by every session: counted once
        store.get(f"s{i}")  # the next request of the session accounts for what it now holds
        assert store.kept_bytes() <= store.budget_bytes
    assert store.get("s5").trace is traces[5] and store.get("busy").trace is traces[0]
    assert store.get("s1").trace is None  # dropped: it starts again empty
    assert store.kept_bytes() <= store.budget_bytes


def _rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    pytest.skip("no /proc/self/status here")


@pytest.mark.soak
def test_uploading_a_large_trace_in_many_sessions_keeps_memory_within_the_budget(tmp_path, monkeypatch):
    """The issue: each session that uploaded an 18 MB trace kept ~164 MB, sessions were only counted (128)."""
    import gc

    from ui import config, replay

    path = tmp_path / "large.json"
    path.write_text(json.dumps(heavy_pairs(MAX_PAIRS) | {"prompt": "Plovdiv " * 600_000}), encoding="utf-8")
    monkeypatch.setattr(config, "SESSIONS", Sessions(budget_bytes=20_000_000))
    replay.import_trace(str(path), Request("rss-warm-up"))  # the first upload's one-off allocations
    gc.collect()
    before = _rss_mb()
    for i in range(15):
        replay.import_trace(str(path), Request(f"rss-{i}"))
        assert config.SESSIONS.kept_bytes() <= 20_000_000
    gc.collect()
    one = trace_bytes(config.SESSIONS.trace("rss-14")) / 1e6
    assert one > 4  # each upload keeps MB: 15 kept would take 15 x that (measured: +85 MB without the budget)
    grown = _rss_mb() - before
    assert grown < 20 + 3 * one, f"resident memory grew {grown:.0f} MB for a budget of 20 MB ({one:.1f} MB a trace)"
