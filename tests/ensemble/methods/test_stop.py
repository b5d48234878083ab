"""Stop means no token after the click, on every method: the flag is set from inside a forward pass (as a click
lands while a model computes) and nothing that pass or any later one produces is committed or streamed. Tiny
models with the real tokenizers: seconds."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest

from ensemble.methods import EnsembleRun, TokenEvent
from ensemble.settings import Settings

PROMPT = "Sofia went to Plovdiv in 1999. Where did Sofia go?"

CASES = {
    "single": ("single", {}),
    "unite": ("unite", {}),
    "gac": ("gac", {"gac_gate": None}),
    "safe": ("safe", {"lookahead": 4}),
    "specem": ("specem", {"segment_len": 4}),
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("at_pass", [3, 8])
def test_a_pass_that_ends_after_stop_commits_nothing(tiny, case, at_pass):
    method, extra = CASES[case]
    members = [tiny["qwen"]] if method == "single" else [tiny["qwen"], tiny["smollm2"], tiny["gemma3"]]
    cancel = threading.Event()
    job = EnsembleRun(members, PROMPT, method, Settings(max_new_tokens=40, **extra), cancel=cancel)
    passes, streamed, at_stop = [0], [0], {}

    def mid_pass(module, args, output):  # runs inside a model's forward pass, before its result is used
        passes[0] += 1
        if passes[0] == at_pass:
            cancel.set()
            at_stop.update(streamed=streamed[0], tokens=len(job.trace.tokens))

    hooks = [m.model.register_forward_hook(mid_pass) for m in members]
    try:
        for event in job.events():
            if isinstance(event, TokenEvent):
                assert not cancel.is_set(), f"token {event.record.index} streamed after Stop"
                streamed[0] += 1
    finally:
        for hook in hooks:
            hook.remove()
    assert at_stop, "the run ended before the pass that presses Stop"
    assert job.trace.stats.stop_reason == "cancelled"
    assert len(job.trace.tokens) == streamed[0] == at_stop["streamed"]  # the trace is what was streamed
    assert job.trace.text == (job.trace.text[: job.trace.tokens[-1].end] if job.trace.tokens else "")


def test_withdraw_keeps_what_the_viewer_showed(tiny):
    """The app passes the strip's count at the click: the trace keeps those tokens, its text and stats follow."""
    members = [tiny["qwen"], tiny["smollm2"], tiny["gemma3"]]
    cancel = threading.Event()
    job = EnsembleRun(members, PROMPT, "specem", Settings(max_new_tokens=24, segment_len=4), cancel=cancel)
    for event in job.events():
        if isinstance(event, TokenEvent) and event.record.index == 9:
            cancel.set()
    assert job.trace.stats.stop_reason == "cancelled" and len(job.trace.tokens) >= 10
    job.withdraw(6)
    trace = job.trace
    assert len(trace.tokens) == trace.stats.generated_tokens == 6
    assert trace.text == trace.text[: trace.tokens[-1].end] and len(trace.text) == trace.tokens[-1].end
    assert all(r.start < len(trace.text) for r in trace.rounds) and trace.stats.rounds == len(trace.rounds)


class Request:
    session_hash = "stop-test"


@pytest.mark.parametrize("method", ["safe", "specem"])
def test_the_apps_strip_and_trace_stay_as_the_browser_showed_them_at_the_click(tiny, monkeypatch, method):
    """The click lands while a view is on its way: the browser counted an earlier strip. The final strip, the
    trace and its stats hold exactly the tokens counted, whatever the server had committed or sent meanwhile."""
    import visual
    from ui import config, running

    monkeypatch.setattr(config, "load_models", lambda names, progress=None: [tiny[n] for n in names])
    values = dict(max_new_tokens=80, temperature=0.0, top_p=1.0, seed=0, top_k=10, sharpen="auto", sharpen_lambda=0.1,
                  gac_gate=0.0, lookahead=3, fusion="unite", segment_len=3, eta=0.5, scoring="logprob")
    views, counted = [], None
    with running.busy(Request()):
        for view in running.run_stream(PROMPT, method, ["qwen", "smollm2", "gemma3"], None, values, request=Request(),
                                   progress=lambda *a, **k: None):
            views.append(view)
            strips = [v.strip.count('class="el-tok') for v in views]
            if counted is None and strips[-1] >= 6 and len(set(strips)) >= 3:
                counted = sorted(set(strips))[-2]  # the browser still shows the strip before the newest one
                running.stop_run_at(counted, Request())
    assert counted is not None, "the run ended before Stop"
    trace = config.SESSIONS.trace(Request.session_hash)
    assert trace.stats.stop_reason == "cancelled"
    assert views[-1].strip.count('class="el-tok') == counted
    assert len(trace.tokens) == trace.stats.generated_tokens == visual.records_drawn(trace.tokens, counted)
    assert "Stopped after" in views[-1].status


# -- a member that dies mid-run: the partial trace reaches API callers, the views keep their stats ---------------
@pytest.fixture
def dying_member(tiny, monkeypatch):
    """The app on the tiny models; smollm2's process "dies" (MemberDied, as the Ray backend raises it) at its
    12th forward pass."""
    from ensemble.errors import MemberDied
    from ui import api, config, running

    monkeypatch.setattr(config, "load_models", lambda names, progress=None: [tiny[n] for n in names])
    passes = [0]

    def die(module, args):
        passes[0] += 1
        if passes[0] == 12:
            raise MemberDied("smollm2", 4242)

    hook = tiny["smollm2"].model.register_forward_pre_hook(die)
    yield SimpleNamespace(run_ensemble=api.run_ensemble, run_stream=running.run_stream)
    hook.remove()


def test_an_api_caller_gets_the_partial_trace_of_a_member_that_died(dying_member):
    trace = dying_member.run_ensemble(PROMPT, "unite", "qwen,smollm2", {"max_new_tokens": 40})
    assert trace["stats"]["stop_reason"] == "member_failed"
    assert "Member smollm2's process (pid 4242) stopped during the run" in trace["error"]
    assert 0 < len(trace["tokens"]) < 40 and trace["stats"]["generated_tokens"] == len(trace["tokens"])


def test_the_views_keep_their_stats_after_a_member_died(dying_member):
    app = dying_member
    values = dict(max_new_tokens=40, temperature=0.0, top_p=1.0, seed=0, top_k=10, sharpen="auto", sharpen_lambda=0.1,
                  gac_gate=0.0, lookahead=3, fusion="unite", segment_len=3, eta=0.5, scoring="logprob")
    views = list(app.run_stream(PROMPT, "unite", ["qwen", "smollm2"], None, values, request=Request(),
                                progress=lambda *a, **k: None))
    final = views[-1]
    assert "stopped during the run" in final.status
    assert "member_failed" in final.stats and final.token_table is not None and len(final.token_table) > 0
