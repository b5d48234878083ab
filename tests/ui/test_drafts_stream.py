"""The Run tab's strip while SAFE runs: drafts drawn as being checked, append-only, then their decisions; the finished
strip is the trace's (issue 37, Deliver 4)."""

from __future__ import annotations

import itertools
import re
import threading

import visual
from ensemble.methods import EnsembleRun
from ensemble.settings import Settings
from tests.golden_runs import PROMPT, RUNS
from ui.running import Pending, stream_tokens
from ui.view_tuples import RunView

DRAFT = re.compile(r'<span class="el-draft[^"]*" title="[^"]*">(?:<span[^>]*>[^<]*</span>|<(?!/span>)[^>]*>|[^<])*</span>')


def test_the_strip_shows_drafts_then_their_decisions_append_only(tiny):
    names, method, settings = RUNS["safe"]
    job = EnsembleRun([tiny[n] for n in names], PROMPT, method, Settings(stop_strings=[], **settings))
    view = RunView(strip="")
    pending = Pending(visual.StripBuilder(method, job.trace.models))
    strips = [v.strip for v in stream_tokens(job.events(), view, "running", pending, threading.Event())]
    pending.drawn()
    final = visual.strip_html(job.trace)
    assert pending.verified == final  # the finished strip holds no draft: it is the trace's, as a replay draws it
    assert all(b.startswith(a) for a, b in itertools.pairwise(strips))  # every update an append
    first = strips[0]
    assert "el-draft" in first and "el-tok" not in first  # the first thing on the strip is a draft being checked
    assert 'title="being checked: tiny-smollm2&#x27;s draft in round 0' in first
    streamed = strips[-1] + pending.ready
    assert DRAFT.sub("", streamed) == final[: len(DRAFT.sub("", streamed))]  # drafts aside, the trace's strip
    assert len(DRAFT.findall(streamed)) >= len(job.trace.rounds)
    replaced = [t for t in job.trace.tokens if t.decision == "ensembled_replaced"]
    assert replaced and final.count(" data-draft=") == len(replaced)  # the draft each fused key replaced, to strike
    legend = visual.legend_html(method, job.trace.models, job.trace.settings, drafts=True)
    assert 'class="el-swatch el-draft"' in legend and "being checked" in legend


def test_a_draft_is_escaped_like_any_model_output():
    text = 'ok <img src=x onerror="alert(1)">${x}`'
    html = visual.draft_html(text, 3, len(text), "<b>m</b>", 2)
    assert "<img" not in html and "<b>" not in html and "${" not in html and "`" not in html
    assert html.startswith('<span class="el-draft" title="being checked: &lt;b&gt;m&lt;/b&gt;&#x27;s draft in round 2')


def test_a_safe_fork_shows_its_drafts_being_checked_then_the_verified_text(tiny):
    from ensemble.trace import RunTrace
    from tests.conftest import FIXTURES
    from ui.forking import fork_stream

    trace = RunTrace.from_json((FIXTURES / "golden" / "safe.json").read_bytes())
    models = {f"tiny-{name}": model for name, model in tiny.items()}
    views = list(fork_stream(trace, 10, "safe", lambda names: list(names), lambda names: [models[n] for n in names],
                             lambda loaded: None, threading.Event()))
    assert 'class="el-draft"' in views[1].fork_view  # after "Loading": the first drafted token, before any is verified
    assert "el-draft" not in views[-1].fork_view and "Fork done" in views[-1].fork_view
