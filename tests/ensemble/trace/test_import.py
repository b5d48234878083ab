"""Uploaded traces: limits before parsing, consistency checks, and a property test over mutated traces.

Whatever a visitor uploads, the Trace tab either replays it in every view or refuses it with one line; it never
shows an error popup or raises in the server."""

from __future__ import annotations

import copy
import json
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import visual
from ensemble.errors import TraceFormatError
from ensemble.trace import RunTrace
from tests.conftest import FIXTURES

NAMES = ["single", "safe", "safe_math", "unite", "gac", "specem"]
VALID = {name: json.loads((FIXTURES / f"{name}.json").read_text(encoding="utf-8")) for name in NAMES}


class Request:
    session_hash = "trace-import-test"


class Click:
    def __init__(self, index):
        self.index = index  # the click's data, as gr.EventData exposes it


def refused(data) -> str:
    text = data if isinstance(data, str) else json.dumps(data)
    with pytest.raises(TraceFormatError) as err:
        RunTrace.from_json(text)
    message = str(err.value)
    assert message and "\n" not in message and len(message) < 400
    return message


# -- limits checked before parsing ---------------------------------------------------------------------------
def test_deep_nesting_is_refused_before_parsing():
    assert "nests deeper than 32" in refused("[" * 100_000 + "]" * 100_000)
    data = copy.deepcopy(VALID["safe"])
    deep: dict = {}
    node = deep
    for _ in range(900):
        node["x"] = {}
        node = node["x"]
    data["tokens"][3]["details"] = deep
    assert "nests deeper" in refused(data)


@pytest.mark.parametrize("number", ["1" + "0" * 100, "-9007199254740993", "1e400", "NaN", "Infinity", "-Infinity"])
def test_numbers_are_bounded(number):
    text = json.dumps(VALID["safe"]).replace('"generated_tokens": 16', f'"generated_tokens": {number}')
    assert number[:8] in text
    assert "number" in refused(text)


@pytest.mark.timing
def test_a_twenty_megabyte_trace_is_scanned_quickly():
    data = copy.deepcopy(VALID["safe"])
    data["prompt"] = "Plovdiv " * 2_400_000  # 19 MB of one string
    started = time.perf_counter()
    RunTrace.from_json(json.dumps(data))
    assert time.perf_counter() - started < 10  # a generous bound: a scan that recursed or went quadratic would not end


# -- consistency ----------------------------------------------------------------------------------------------
def _mutated(name, change):
    data = copy.deepcopy(VALID[name])
    change(data)
    return data


def _all_spans_whole(d):
    for t in d["tokens"]:
        t["start"], t["end"] = 0, len(d["text"])


@pytest.mark.parametrize(
    ("name", "change", "message"),
    [
        ("safe", _all_spans_whole, "not a byte token"),
        ("safe", lambda d: [t.update(index=7) for t in d["tokens"]], "index is 7"),
        ("safe", lambda d: d["tokens"][0].update(index=-5), "index is -5"),
        ("safe", lambda d: d["tokens"][3].update(text=" flew"), "reads ' flew' but covers ' went'"),
        ("safe", lambda d: d.update(models=[]), "models is empty"),
        ("safe", lambda d: d.update(method="bogus"), "not one of single"),
        ("safe", lambda d: d["tokens"][2].update(model="mallory"), "not one of the trace's models"),
        ("safe", lambda d: [d["tokens"].pop(4), [t.update(index=i) for i, t in enumerate(d["tokens"])]],
         "tokens must cover the text in order"),
        ("safe", lambda d: d.update(text=d["text"] + " more"), "cover 30 of the text's 35"),
        ("specem", lambda d: d["rounds"][1]["scores"][0].append(0.5), "one row per verifier"),
        ("specem", lambda d: d["rounds"][1]["scores"].pop(), "one row per verifier"),
        ("specem", lambda d: d["rounds"][0].update(winner_index=9), "winner_index 9"),
        ("specem", lambda d: d["rounds"][0]["aggregate"].pop(), "aggregate has 2 values for 3 candidates"),
        ("specem", lambda d: d["rounds"][2].update(index=0), "rounds are numbered"),
        ("specem", lambda d: d["rounds"][0]["candidates"][0].update(model="mallory"), "names a model that is not in the trace"),
        ("specem", lambda d: d["tokens"][5].update(round=99), "round 99"),
    ],
)
def test_inconsistent_traces_are_refused(name, change, message):
    assert message in refused(_mutated(name, change))


# -- property: every mutation loads and renders, or is refused with a message ---------------------------------
def render_everything(trace: RunTrace) -> None:
    """What the app shows for a trace: every Run-tab view, the inspector for some tokens, every round."""
    import tempfile

    from ui import api, replay

    path = Path(tempfile.mkdtemp()) / "t.json"
    path.write_text(trace.to_json(), encoding="utf-8")
    _strip, status, *views = replay.import_trace(str(path), Request())
    assert "Replaying" in status, status
    for view in (_strip, status, *views):
        if hasattr(view, "to_json"):
            view.to_json()
        elif isinstance(view, str):
            view.encode("utf-8")  # valid text: a response with a lone surrogate is a bare "Error" in the browser
    indexes = sorted({0, len(trace.tokens) // 2, len(trace.tokens) - 1}) if trace.tokens else []
    for index in indexes:
        outputs = replay.inspect(Request(), Click(index))
        for out in outputs:
            if hasattr(out, "to_json"):
                out.to_json()
        json.dumps(outputs[-1], allow_nan=False)
        for out in outputs:
            if isinstance(out, str):
                out.encode("utf-8")
        json.dumps(api.explain_token(trace.to_dict(), index), ensure_ascii=False).encode("utf-8")  # the API's answer
    for k in range(len(trace.rounds)):
        fig = replay.show_round(k, Request())
        if fig is not None:
            fig.to_json()
    visual.strip_html(trace, show_whitespace=False)
    visual.stats_frame(trace)


def _paths(value, prefix=()):
    """Every path into a JSON value (dict keys and list indexes), the root included."""
    yield prefix
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value[:6]):  # the first few items of long lists are enough
            yield from _paths(v, (*prefix, i))


SURROGATES = st.text(st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF), min_size=1, max_size=3)
ADVERSARIAL = st.sampled_from(['"' + '\\"' * 40, "\\", "]]]}}}", "[[[{{{", "\u202e\u202d", "\x00", "<script>x</script>",
                               "a\ud800b", "\udfff", "\ud83d\ude00", "gemma3\ud800", "x" * 300])
HUGE = st.sampled_from([[["k", 0.5]] * 6_000, ["qwen"] * 70, [[0.5] * 70] * 70, "Plovdiv " * 150_000,
                        {f"m{i}": 0.1 for i in range(100)}, [{"model": "qwen", "text": "x"}] * 70])
JSON_LEAF = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**60), 2**60), st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=12), st.sampled_from(["", "qwen", "smollm2", "<eos>", "<0xF0>", "\ufffd", "![x](http://a.invalid/x.png)"]),
    SURROGATES, ADVERSARIAL,
)
JSON_VALUE = st.recursive(JSON_LEAF, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
                          max_leaves=8)


def _set(data, path, value):
    node = data
    for step in path[:-1]:
        node = node[step]
    node[path[-1]] = value


def _delete(data, path):
    node = data
    for step in path[:-1]:
        node = node[step]
    del node[path[-1]]


@settings(max_examples=150)
@given(name=st.sampled_from(NAMES), data=st.data())
def test_mutated_traces_render_or_are_refused_with_one_line(name, data):
    trace = copy.deepcopy(VALID[name])
    for _ in range(data.draw(st.integers(1, 3))):
        paths = [p for p in _paths(trace) if p]
        path = data.draw(st.sampled_from(paths))
        action = data.draw(st.sampled_from(["replace", "replace", "delete", "number", "huge"]))
        try:
            if action == "delete":
                _delete(trace, path)
            elif action == "huge":
                _set(trace, path, copy.deepcopy(data.draw(HUGE)))  # a fresh copy: later mutations change it
            elif action == "number":
                _set(trace, path, data.draw(st.sampled_from([-1, 0, 1, 7, 10**6, 2**53, -(2**53), 0.5, 1e15])))
            else:
                _set(trace, path, data.draw(JSON_VALUE))
        except (KeyError, IndexError, TypeError):
            pass  # the path vanished with an earlier mutation
    text = json.dumps(trace, ensure_ascii=data.draw(st.booleans()))  # surrogates escaped, or raw characters
    try:
        loaded = RunTrace.from_json(text)
    except TraceFormatError as exc:
        assert str(exc) and "\n" not in str(exc) and len(str(exc)) < 600
        str(exc).encode("utf-8")  # the refusal itself is valid text
        return
    loaded.to_json().encode("utf-8")  # text was cleaned at the door: every string encodes
    render_everything(loaded)


@pytest.mark.parametrize("method", ["single", "unite", "gac", "safe", "specem"])
def test_every_fresh_trace_passes_the_consistency_checks(tiny, method):
    """The checks refuse nothing the engine writes: random tiny models write byte tokens, emoji halves, stop
    strings cutting tokens short, SAFE replacements."""
    from ensemble.methods import generate
    from ensemble.settings import Settings

    models = [tiny["qwen"], tiny["smollm2"], tiny["gemma3"]]
    for prompt, temperature, stops in [("👩‍👩‍👧‍👦 🏳️‍🌈 🇧🇬 中文 e\u0301", 1.0, None), ("Hi 🙂", 0.7, [" "])]:
        trace = generate(models, prompt, method, Settings(max_new_tokens=16, temperature=temperature, seed=3,
                                                          stop_strings=stops, segment_len=5))
        assert RunTrace.from_json(trace.to_json()).to_dict() == trace.to_dict()


def test_an_uploaded_trace_fills_only_what_the_form_can_safely_hold():
    """Re-running an upload: its prompt and method, the offered models among its own (drafter first), and the
    settings their declarations accept; names and values the app does not offer are left out."""
    from ui import replay

    data = copy.deepcopy(VALID["safe_math"])
    data["models"] = ["smollm2", "<img src=x>", "gemma3"]
    data["settings"] |= {"lookahead": 999, "max_new_tokens": 40, "sharpen": "geometric", "fusion": "magic"}
    data["tokens"] = [t | {"model": "smollm2"} for t in data["tokens"]]
    data["drafter"], data["schema_version"] = "gemma3", 2
    data["rounds"] = []
    for t in data["tokens"]:
        t.pop("fusion", None)
        t["details"] = {}
        t["decision"], t["round"] = "drafter", None
    trace = RunTrace.from_dict(data)
    form = replay.form_of(trace)
    assert form["prompt"] == trace.prompt and form["method"] == "safe"
    assert form["models"] == ["gemma3", "smollm2"]
    assert form["settings"]["max_new_tokens"] == 40 and form["settings"]["sharpen"] == "geometric"
    assert "lookahead" not in form["settings"] and "fusion" not in form["settings"]


class SeqClick:
    def __init__(self, index, seq):
        self.index, self._data = index, {"index": index, "seq": seq}


def _session_with(tmp_path, session: str):
    """A request class of session ``session``, and the safe_math trace that session has loaded."""
    from ui import config, replay

    class Request:
        session_hash = session

    path = tmp_path / "t.json"
    path.write_text(json.dumps(VALID["safe_math"]), encoding="utf-8")
    replay.import_trace(str(path), Request())
    return Request, config.SESSIONS.trace(session)


def test_an_overtaken_token_click_is_dropped_and_the_newest_click_is_the_selection(tmp_path):
    """Clicks may be answered in any order (and Gradio replays a deferred event with its first data), so a click's
    answer is dropped once a newer click of the session has come in; the newest click's token is the one a fork
    starts from, whatever order the answers come in."""
    from ui import config, replay

    Other, trace = _session_with(tmp_path, "overtaken-clicks")
    assert replay.inspect_latest(Other(), SeqClick(3, seq=2)) is not None
    assert replay.inspect_latest(Other(), SeqClick(1, seq=1)) is None  # the older click's answer comes too late
    assert config.SESSIONS.get("overtaken-clicks").selected == (trace, 3)
    view = replay.inspect_latest(Other(), SeqClick(5, seq=3))
    assert view is not None and "token #5" in view.explanation
    assert config.SESSIONS.get("overtaken-clicks").selected == (trace, 5)
    # a click that lands off the strip's tokens answers with the hint and clears the selection
    assert "click a token" in replay.inspect_latest(Other(), SeqClick(10_000, seq=4)).explanation
    assert config.SESSIONS.get("overtaken-clicks").selected is None


def test_the_per_token_table_filters_the_sessions_trace_by_decision(tmp_path):
    from ui import replay

    Me, trace = _session_with(tmp_path, "token-filter")
    for decision, count in trace.stats.decisions.items():
        table = replay.filter_tokens(decision, Me())
        assert len(table) == count and set(table["decision"]) == {decision}
    assert len(replay.filter_tokens("all", Me())) == len(trace.tokens)

    class Nobody:
        session_hash = "token-filter-empty"

    assert replay.filter_tokens("all", Nobody()).__class__.__name__ != "DataFrame"  # no trace: the table is left as it is


def test_a_gzip_packed_trace_reads_as_its_json_and_a_gzip_bomb_is_refused():
    """evaluate keeps traces as .json.gz: fork, the Trace tab and read_trace take them as they are; a small file
    that unpacks past the 20 MB limit is refused after reading one byte past it, and a broken one in one line."""
    import gzip

    raw = (FIXTURES / "safe.json").read_bytes()
    assert RunTrace.from_json(gzip.compress(raw)).to_dict() == RunTrace.from_json(raw).to_dict()
    bomb = gzip.compress(b" " * (21 * 1024 * 1024))
    assert len(bomb) < 100_000
    with pytest.raises(TraceFormatError, match="the limit is 20 MB"):
        RunTrace.from_json(bomb)
    with pytest.raises(TraceFormatError, match="gzip-packed but does not unpack"):
        RunTrace.from_json(gzip.compress(raw)[:200])
