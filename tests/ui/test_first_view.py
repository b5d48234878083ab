"""The recorded run the app replays on load (assets/first-view.json): still the app's first example at its defaults, timings
a visitor may believe, and the first screen opening on its lesson."""

from __future__ import annotations

import re
import uuid
from types import SimpleNamespace

import visual
from ensemble.trace import RunTrace
from ensemble.trace.decisions import Decision
from ui import config, replay
from ui.controls import control_names, initial_value, settings_from_controls
from ui.recording import implausible_timings
from ui.tabs import EXAMPLES, FIRST_VIEW
from ui.view_tuples import RunView


def test_the_recording_is_the_first_example_at_the_apps_defaults():
    trace = RunTrace.from_json(FIRST_VIEW.read_bytes())  # a valid trace, as every upload is checked
    prompt, method, models = EXAMPLES[0]
    assert (trace.prompt, trace.method, trace.models) == (prompt, method, models)
    defaults = settings_from_controls({name: initial_value(name) for name in control_names()}).to_dict()
    defaults["sharpen"] = "heuristic"  # what SAFE resolves "auto" to, as the trace records it
    assert {k: trace.settings[k] for k in defaults} == defaults, "rerun scripts/record_first_view.py"
    assert trace.stats.decisions.get("oov_blocked", 0) >= 1  # the lesson the first view teaches: Sofia is blocked
    assert not trace.error and trace.stats.stop_reason in ("eos", "stop_string", "budget")


def test_the_recordings_timings_are_ones_an_idle_two_core_cpu_gives():
    """Every visitor reads the recording's latency, tokens/s and first-token time: a recording made on a busy machine
    (435.81 s for 16 tokens that take 3 s live) must not ship; scripts/record_first_view.py refuses to write one."""
    trace = RunTrace.from_json(FIRST_VIEW.read_bytes())
    assert implausible_timings(trace) == [], "record the first view again on a quiet machine"


def test_implausible_timings_names_what_a_busy_machine_does():
    trace = RunTrace.from_json(FIRST_VIEW.read_bytes())
    s = trace.stats
    s.generated_tokens, s.latency_s, s.first_token_s = 16, 435.81, 205.29  # the recording shipped on 2 Dec 2026
    s.forward_s, s.forward_tokens = {"qwen": 260.19, "smollm2": 104.81}, {"qwen": 72, "smollm2": 76}
    reasons = implausible_timings(trace)
    assert len(reasons) == 3 and "27.2 s per token" in reasons[0] and "qwen spent 3.61 s" in reasons[1]
    s.latency_s, s.first_token_s, s.forward_s = 3.0, 0.9, {"qwen": 1.2, "smollm2": 0.6}  # the same run, idle
    assert implausible_timings(trace) == []
    s.first_token_s = 4.0  # after the run ended
    assert implausible_timings(trace) == ["the first token came after 4.0 s, outside the run's 3.0 s"]


def test_the_first_screen_opens_on_the_first_blocked_token_explained_and_labels_its_timings_recorded():
    """The lesson without a click: the recording's first blocked token is selected (drawn so, and where a fork
    starts) with its explanation, tokenization rows and charts filled; its timings say they are recorded."""
    request = SimpleNamespace(session_hash=f"first-view-{uuid.uuid4()}", query_params={})
    view, inspected = replay.first_view(request)
    trace = RunTrace.from_json(FIRST_VIEW.read_bytes())
    blocked = next(t.index for t in trace.tokens if t.decision == Decision.OOV_BLOCKED)
    selected = re.findall(r'<span class="([^"]*)" data-i="(\d+)"', view.strip)
    assert [int(i) for cls, i in selected if "el-selected" in cls.split()] == [blocked]
    assert f"token #{blocked}" in inspected.explanation and "gemma3" in inspected.explanation
    assert inspected.tokenization and inspected.record_json
    assert config.session(request).selected[1] == blocked
    assert "recorded latency" in view.stats and "recorded tokens/s" in view.stats and "recorded first token" in view.stats
    assert "Timings as recorded " + trace.created[:10] in view.stats
    again, unchanged = replay.first_view(request)  # a session that already shows a run keeps it, inspector and all
    assert again == RunView() and unchanged == replay.UNCHANGED


def test_a_live_runs_timings_are_not_labelled_recorded():
    trace = RunTrace.from_json(FIRST_VIEW.read_bytes())
    assert "recorded" not in visual.stats_html(trace)
    assert "recorded latency" not in replay.final_views(trace, "", "done").stats
