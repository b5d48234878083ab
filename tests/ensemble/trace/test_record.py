"""The trace: JSON round trip and schema checks on untrusted files."""

from __future__ import annotations

import json

import pytest

from ensemble.errors import TraceFormatError
from ensemble.methods import generate
from ensemble.settings import Settings
from ensemble.trace import MAX_TRACE_BYTES, RunTrace
from tests.conftest import FIXTURES

# The fixtures are version-1 files; loading migrates them to version 2, which records the resolved drafter.
V1_DRAFTERS = {"single": "qwen", "safe": "smollm2", "safe_math": "qwen", "unite": "qwen", "gac": "qwen", "specem": None}


@pytest.mark.parametrize("name", ["single", "safe", "safe_math", "unite", "gac", "specem"])
def test_fixture_round_trip(name):
    text = (FIXTURES / f"{name}.json").read_text(encoding="utf-8")
    trace = RunTrace.from_json(text)
    again = RunTrace.from_json(trace.to_json())
    expected = json.loads(text)
    assert expected["schema_version"] == 1  # kept as version-1 test inputs
    expected["stats"].setdefault("forward_s", {})  # written before forward time was recorded: loads empty
    expected["stats"].setdefault("member_bytes", {})  # likewise (bytes to and from member processes)
    expected["stats"].setdefault("member_row_bytes", {})  # likewise (what whole rows of the same answers take)
    expected.setdefault("fork", None)  # written before forks: none is one
    expected["settings"].setdefault("drafter_weight", 1.0)  # written before SAFE weighed its drafter: equal weights
    expected["settings"].setdefault("sharpen_scope", "vocabulary")  # written before issue 30's guards: the old reading
    expected["settings"].setdefault("after_kept", "walk-on")  # likewise: they walked on after a kept fusion
    expected["settings"].setdefault("unite_missing", "once")  # written before issue 39's option: the default rule
    expected.update(schema_version=2, drafter=V1_DRAFTERS[name])
    assert again.to_dict() == trace.to_dict() == expected


def test_fresh_trace_round_trip(tiny):
    trace = generate([tiny["qwen"], tiny["gemma3"]], "Hi 🙂", "safe", Settings(max_new_tokens=12))
    data = json.loads(trace.to_json())
    assert data["schema_version"] == 2 and data["method"] == "safe" and data["drafter"] == "tiny-qwen"
    assert data["settings"]["sharpen_scope"] == "guarded" and data["settings"]["after_kept"] == "walk-on"  # the options used
    assert data["settings"]["unite_missing"] == "once"
    assert RunTrace.from_dict(data).to_dict() == trace.to_dict()
    for key in ("generated_tokens", "ensemble_steps", "et_ratio", "latency_s", "tokens_per_s"):
        assert key in data["stats"]
    # Every model's time inside its forward passes, within the run's latency.
    seconds = data["stats"]["forward_s"]
    assert set(seconds) == {"tiny-qwen", "tiny-gemma3"} and all(s > 0 for s in seconds.values())
    assert sum(seconds.values()) <= data["stats"]["latency_s"]


def _valid() -> dict:
    return json.loads((FIXTURES / "safe.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d.update(schema_version=99), "schema_version"),
        (lambda d: d.pop("text"), "missing the field 'text'"),
        (lambda d: d["tokens"][0].update(decision="<script>"), "decision"),
        (lambda d: d["tokens"][0].update(end=10**6), "outside the text"),
        (lambda d: d["tokens"][0].update(start="0"), "must be int"),
        (lambda d: d.update(models="qwen"), "trace.models must be list"),
        (lambda d: d["stats"].update(et_ratio="high"), "must be a number"),
        (lambda d: d["stats"].update(forward_s={"qwen": "slow"}), "trace.stats.forward_s must map names to numbers"),
    ],
)
def test_schema_errors_are_precise(mutate, message):
    data = _valid()
    mutate(data)
    with pytest.raises(TraceFormatError) as err:
        RunTrace.from_dict(data)
    assert message in str(err.value)


def test_untrusted_files_are_refused_clearly():
    with pytest.raises(TraceFormatError, match="not valid JSON"):
        RunTrace.from_json("{not json")
    with pytest.raises(TraceFormatError, match="UTF-8"):
        RunTrace.from_json(b"\xff\xfe\x00")
    with pytest.raises(TraceFormatError, match="20 MB"):
        RunTrace.from_json(b" " * (MAX_TRACE_BYTES + 1))
    with pytest.raises(TraceFormatError, match="JSON object"):
        RunTrace.from_json("[1, 2, 3]")


@pytest.mark.parametrize("name", ["single", "safe", "safe_math", "unite", "gac", "specem"])
def test_version_1_and_its_version_2_round_trip_render_the_same(name):
    import visual
    from ensemble.trace.decisions import DETAILS as types

    v1 = RunTrace.from_json((FIXTURES / f"{name}.json").read_text(encoding="utf-8"))
    data = json.loads(v1.to_json())
    assert data["schema_version"] == 2 and data["drafter"] == V1_DRAFTERS[name]
    v2 = RunTrace.from_dict(data)
    assert all(type(t.details) is types[t.decision] for t in v2.tokens)  # typed in memory, a dict on disk
    assert visual.strip_html(v1) == visual.strip_html(v2)
    for record in v1.tokens:
        assert visual.explain(v1, record.index) == visual.explain(v2, record.index)
        assert visual.tokenization_html(v1, record.index) == visual.tokenization_html(v2, record.index)


def test_the_drafter_must_be_a_model():
    data = json.loads(RunTrace.from_json((FIXTURES / "safe.json").read_text(encoding="utf-8")).to_json())
    data["drafter"] = "nobody"
    with pytest.raises(TraceFormatError, match="drafter"):
        RunTrace.from_dict(data)
