"""The recorded run the app replays on load (assets/first-view.json) still is the app's first example at its defaults."""

from __future__ import annotations

from ensemble.trace import RunTrace
from ui.controls import control_names, initial_value, settings_from_controls
from ui.tabs import EXAMPLES, FIRST_VIEW


def test_the_recording_is_the_first_example_at_the_apps_defaults():
    trace = RunTrace.from_json(FIRST_VIEW.read_bytes())  # a valid trace, as every upload is checked
    prompt, method, models = EXAMPLES[0]
    assert (trace.prompt, trace.method, trace.models) == (prompt, method, models)
    defaults = settings_from_controls({name: initial_value(name) for name in control_names()}).to_dict()
    defaults["sharpen"] = "heuristic"  # what SAFE resolves "auto" to, as the trace records it
    assert {k: trace.settings[k] for k in defaults} == defaults, "rerun scripts/record_first_view.py"
    assert trace.stats.decisions.get("oov_blocked", 0) >= 1  # the lesson the first view teaches: Sofia is blocked
    assert not trace.error and trace.stats.stop_reason in ("eos", "stop_string", "budget")
