"""A finished trace in the Run tab: every view of it, the recorded first view, a clicked token's inspector, and a
trace's round trip through a file (export; upload, which also fills the Run form to run it again).

No model runs here: a trace comes from a finished run (``ui.running``), an upload, an evaluation's answer or the
recording of the first example, and lives in the session (``ui.config.SESSIONS``).
"""

from __future__ import annotations

import re
import tempfile
import time
from pathlib import Path

import gradio as gr

import visual
from ensemble.capabilities import is_segments
from ensemble.errors import TraceFormatError
from ensemble.models.runtimes import split_runtime
from ensemble.settings import METHODS
from ensemble.trace import MAX_TRACE_BYTES, RunTrace
from ensemble.trace.decisions import Decision
from ensemble.trace.read import read_trace
from ui import config, openai_routes, space, tabs
from ui.controls import control_values
from ui.sessions import if_newest
from ui.view_tuples import KEEP, ExportView, InspectView, RunView


def recorded_note(trace: RunTrace) -> str:
    """The line under a replayed trace's timings: they are the recording's, not this machine's now."""
    when = f" {trace.created[:10]}" if trace.created else ""
    return f"Timings as recorded{when}, not measured now: press Run to time a run here."


def final_views(trace: RunTrace, strip: str, status: str, recorded: bool = False) -> RunView:
    """Every view of a finished (or uploaded) trace; ``recorded``: replayed, so its timings are labelled as recorded."""
    specem = bool(is_segments(trace.method) and trace.rounds)
    last_round = max(0, len(trace.rounds) - 1)
    return RunView(
        strip=strip,
        status=visual.status_html(status),
        legend=visual.trace_legend(trace),
        stats=visual.stats_html(trace, recorded_note(trace) if recorded else None),
        token_table=visual.token_frame(trace),
        token_filter="all",
        rounds=visual.rounds_html(trace) if specem else "",
        heatmap=visual.score_heatmap(trace, last_round) if specem else None,
        weights_plot=visual.weights_figure(trace) if specem else None,
        round_slider=gr.update(maximum=max(1, last_round), value=last_round),
        specem_view=gr.update(visible=specem),
        weights_note=visual.weights_note(trace) if specem else "",
        fork_view="",
    )


def replay(request, trace: RunTrace, status: str) -> RunView:
    """Show ``trace`` (an upload, an evaluation's answer) in the Run tab as the session's trace."""
    session = config.session(request)
    session.running, session.trace = None, trace
    return final_views(trace, visual.strip_html(trace), status, recorded=True)


_FIRST: list[RunTrace] = []
UNCHANGED = InspectView(*[KEEP] * len(InspectView._fields))
"""The inspector as it is (a view that leaves it alone)."""


def first_view(request: gr.Request) -> tuple[RunView, InspectView]:
    """The recorded run of the first example (``ui.tabs.FIRST_VIEW``), replayed on load so every view shows
    something before anything runs; labelled as a recording, its timings too. Its first blocked token is selected
    with its explanation open, so the first screen already shows the lesson (why the ensemble refused to fuse there)
    without the visitor having to find out that tokens are clickable. A session that already has a run keeps it."""
    session = config.session(request)
    if session.running is not None or session.trace is not None:
        return RunView(), UNCHANGED
    linked = openai_routes.trace_asked(request)  # ?trace=ID: an answer of the /v1 API, replayed with its inspector
    if linked is not None:
        status = (f"Replaying the {linked.method} run of {', '.join(linked.models)} that answered an API request "
                  f"({len(linked.tokens)} tokens). Click any token.")
        view = replay(request, linked, status)
        if not linked.tokens:
            return view, cleared_inspector()
        lesson = next((t.index for t in linked.tokens if t.decision != Decision.CONSENSUS), 0)
        session.selected = (linked, lesson)
        return view._replace(strip=selected_in_strip(view.strip, lesson)), inspector(linked, lesson)
    if not _FIRST:
        _FIRST.append(RunTrace.from_json(tabs.FIRST_VIEW.read_bytes()))
    trace = _FIRST[0]
    asked = (getattr(request, "query_params", None) or {}).get("prompt")
    if asked and asked != trace.prompt:  # a link opened another prompt: the recording is not of it
        return RunView(status=visual.status_html("A link filled in this prompt and its settings: press Run to run it.")), UNCHANGED
    session.trace = trace
    pool = config.POOL
    status = space.first_view_status(trace.method, trace.models, trace.created, config.RUNTIME, config.DEVICE, pool.unavailable)
    view = final_views(trace, visual.strip_html(trace), status, recorded=True)
    lesson = next((t.index for t in trace.tokens if t.decision == Decision.OOV_BLOCKED), None)
    if lesson is None:
        return view, cleared_inspector()
    session.selected = (trace, lesson)  # "Fork from the selected token" forks there, as after a click
    return view._replace(strip=selected_in_strip(view.strip, lesson)), inspector(trace, lesson)


def selected_in_strip(strip: str, index: int) -> str:
    """The strip's HTML with token ``index`` drawn selected, as a click on it draws it (``ui.tabs.STRIP_JS``)."""
    return re.sub(rf'<span class="([^"]*)" data-i="{int(index)}"', rf'<span class="\1 el-selected" data-i="{int(index)}"',
                  strip, count=1)


# -- a clicked token ----------------------------------------------------------------------------------------------
def inspect(request: gr.Request, evt: gr.EventData) -> InspectView:
    trace = config.SESSIONS.trace(config.session_key(request))
    index = getattr(evt, "index", None)  # what the strip's click handler passed to trigger('click', {index})
    if trace is None or not isinstance(index, int) or not 0 <= index < len(trace.tokens):
        return InspectView(explanation="<p>Run the ensemble or load a trace, then click a token.</p>")
    return inspector(trace, index)


def inspector(trace: RunTrace, index: int) -> InspectView:
    """The inspector of token ``index`` of ``trace``: why, each model's tokenization, the charts, the raw record."""
    topk, fused = visual.topk_figure(trace, index), visual.fusion_figure(trace, index)
    return InspectView(
        explanation=visual.explain(trace, index),
        tokenization=visual.tokenization_html(trace, index),
        charts_hint=visual.charts_note(trace, index),  # a sentence where the fused chart would be empty
        topk_plot=gr.update(value=topk, visible=topk is not None),
        fusion_plot=gr.update(value=fused, visible=fused is not None),
        record_json=visual.inspector_json(trace, index),
        whatif=visual.whatif_html(trace, index),
    )


def cleared_inspector() -> InspectView:
    """The inspector with no token selected: what a new run, an uploaded trace or an evaluation's answer starts with
    (an explanation of the previous trace's token beside a new strip would explain a token it does not have)."""
    return InspectView(charts_hint=tabs.CHARTS_HINT, topk_plot=gr.update(value=None, visible=False),
                       fusion_plot=gr.update(value=None, visible=False))


def inspect_latest(request: gr.Request, evt: gr.EventData) -> InspectView | None:
    """``inspect`` for a strip click, or None where a newer click of this session has overtaken it (its answer would
    be stale). Only the newest click's token becomes the selected one, where "Fork from the selected token" forks."""
    key = config.session_key(request)

    def answer():
        trace, index = config.SESSIONS.trace(key), getattr(evt, "index", None)
        valid = trace is not None and isinstance(index, int) and 0 <= index < len(trace.tokens)
        return inspect(request, evt), {"selected": (trace, index) if valid else None}

    return if_newest(config.SESSIONS, key, "strip", evt, answer)


def filter_tokens(decision, request: gr.Request):
    """The per-token table of the session's trace, only the tokens of ``decision`` ("all": every token)."""
    trace = config.SESSIONS.trace(config.session_key(request))
    return visual.token_frame(trace, decision) if trace is not None else gr.skip()


def show_round(round_index, request: gr.Request):
    trace = config.SESSIONS.trace(config.session_key(request))
    if trace is None or not trace.rounds:
        return None
    return visual.score_heatmap(trace, min(int(round_index or 0), len(trace.rounds) - 1))


# -- a trace to a file and back -------------------------------------------------------------------------------------
def export_trace(request: gr.Request) -> ExportView:
    trace = config.SESSIONS.trace(config.session_key(request))
    if trace is None:
        raise gr.Error("Nothing to export yet: run the ensemble or load a trace first.")
    folder = Path(tempfile.mkdtemp(prefix="ensemble-lens-"))
    stamp = time.strftime("%Y%m%d-%H%M")  # short enough to read whole in the download boxes: trace-safe-20261203-1740.json
    json_path = folder / f"trace-{trace.method}-{stamp}.json"
    json_path.write_text(trace.to_json(indent=1), encoding="utf-8")
    csv_path = folder / f"tokens-{trace.method}-{stamp}.csv"
    csv_path.write_text(visual.tokens_csv(trace), encoding="utf-8")
    html_path = folder / f"run-{trace.method}-{stamp}.html"
    html_path.write_text(visual.run_document(trace), encoding="utf-8")
    return ExportView(str(json_path), str(csv_path), str(html_path))


def import_trace(file, request: gr.Request) -> RunView:
    """Replay an uploaded trace in every view; the file is JSON only, schema- and size-checked."""
    if file is None:
        return RunView(strip="", status=visual.status_html("Choose a JSON trace file."))
    path = Path(file if isinstance(file, str) else getattr(file, "name", ""))
    try:
        if path.stat().st_size > MAX_TRACE_BYTES:
            raise TraceFormatError(f"The file is {path.stat().st_size / 1e6:.1f} MB; the limit is 20 MB.")
        trace = read_trace(path.read_bytes())  # in a reader thread, with a time limit
    except (OSError, TraceFormatError) as exc:
        config.session(request).imported = None
        return RunView(strip=visual.error_html(str(exc)), status=visual.status_html(f"⚠️ Could not load the trace: {exc}"))
    config.session(request).imported = trace
    # Everything in an uploaded trace is untrusted: the status line escapes it like every other view.
    return replay(request, trace, f"Replaying a {trace.method} trace of {', '.join(trace.models)} ({len(trace.tokens)} tokens). "
                                  "Click any token.")


def form_of(trace: RunTrace) -> dict:
    """The Run form's values that re-run an uploaded trace: prompt, method, the offered models among its own (the
    drafter first, so the drafter box follows it), engine settings (values their declarations refuse are left out)."""
    names = list(dict.fromkeys(split_runtime(re.sub(r"#\d+$", "", m))[0] for m in trace.models))
    names = [n for n in names if n in config.MODEL_CHOICES]
    if trace.drafter in names:
        names.remove(trace.drafter)
        names.insert(0, trace.drafter)
    form = {"prompt": trace.prompt, "method": trace.method if trace.method in METHODS else None, "models": names or None}
    return form | {"settings": control_values(trace.settings)}


def form_components(run: tabs.RunTab) -> list:
    """The Run tab's form that :func:`form_updates` fills, as a handler's outputs."""
    return [run.prompt, run.method, run.model_box, run.drafter, *run.controls.values()]


def form_updates(run: tabs.RunTab, trace: RunTrace) -> dict:
    """:func:`form_of` as updates of the Run tab's form (an uploaded trace, an evaluation's answer): Run then runs it
    again, and the prompt box shows the question the strip answers."""
    form = form_of(trace)
    filled = {run.prompt: form["prompt"], **{run.controls[k]: v for k, v in form["settings"].items()}}
    if form["method"]:
        filled[run.method] = form["method"]
    if form["models"]:
        filled[run.model_box] = form["models"]
        filled[run.drafter] = gr.update(choices=form["models"], value=form["models"][0])
    return filled
