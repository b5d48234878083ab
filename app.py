"""Ensemble Lens: the Gradio app. It only wires the engine (``ensemble/``) to the views (``visual/``).

Run it with ``make demo`` (or ``python app.py``); it serves on http://127.0.0.1:7860. On a Hugging Face Space
it also works: the embedded models fall back to their hub ids when their packages are absent.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import re
import tempfile
import time
from pathlib import Path

import gradio as gr

import visual
from ensemble.access import offered_members
from ensemble.align import compare
from ensemble.errors import EnsembleError, InputError, MemberDied, TraceFormatError
from ensemble.fork import fork_method_for, member_names, run_fork
from ensemble.members import backend_from_env, close_backends, interrupt_on_sigterm, make_backend, warm
from ensemble.methods import EnsembleRun, RoundEvent, StatusEvent, TokenEvent
from ensemble.methods.base import clean_prompt
from ensemble.models import DEFAULT_ENSEMBLE, DEFAULT_MODELS, EMBEDDED, GPU_PRESETS, ModelPool
from ensemble.models.runtimes import RUNTIMES, llamacpp_available, runtime_from_env, split_runtime
from ensemble.readable import et_text
from ensemble.settings import METHODS, Settings
from ensemble.trace import MAX_TRACE_BYTES, RunTrace
from ensemble.trace_read import read_trace
from ui import links, space, tabs
from ui import results as results_ui
from ui.api_args import settings_object, token_number
from ui.controls import control_values, settings_from_controls
from ui.files import project_file
from ui.forking import fork_stream
from ui.sessions import Sessions, click_data, if_newest
from ui.views import CompareView, ExportView, ForkView, InspectView, ResultsView, RunView, TokenizerView, outputs, updates

try:  # ZeroGPU on Spaces; a no-op decorator everywhere else
    import spaces  # type: ignore

    gpu = spaces.GPU if os.environ.get("SPACES_ZERO_GPU") else (lambda fn: fn)
except ImportError:  # pragma: no cover - depends on the platform
    gpu = lambda fn: fn  # noqa: E731

DEVICE = os.environ.get("ENSEMBLE_LENS_DEVICE", "cpu")
BACKEND_NAME, BACKEND_WHY = backend_from_env(DEVICE)  # ENSEMBLE_LENS_BACKEND=local|ray|auto (auto: local on one machine)
BACKEND = make_backend(BACKEND_NAME, device=DEVICE)  # where members compute; a process backend's pool holds no weights
RUNTIME = runtime_from_env()  # ENSEMBLE_LENS_RUNTIME=auto|transformers|llamacpp (auto: llama.cpp for the embedded models on a CPU)
POOL = ModelPool(device=DEVICE, runtime=RUNTIME, weights=not BACKEND.remote)
RUNTIME_CHOICES = [r for r in RUNTIMES if r != "llamacpp" or llamacpp_available()]
QUEUE_SIZE = int(os.environ.get("ENSEMBLE_LENS_QUEUE", "16"))
RUN_CONCURRENCY = int(os.environ.get("ENSEMBLE_LENS_CONCURRENCY", "2"))
STREAM_INTERVAL = 0.2  # seconds between streamed updates (about 5 per second)
MCP_SERVER = os.environ.get("ENSEMBLE_LENS_MCP", "1") != "0"  # the API's four endpoints as MCP tools for agents

PRESETS_VISIBLE = DEVICE != "cpu" or os.environ.get("ENSEMBLE_LENS_PRESETS") == "1"
MODEL_CHOICES = list(EMBEDDED) + (list(GPU_PRESETS) if PRESETS_VISIBLE else [])


# -- per-session state (ui.sessions) ------------------------------------------------------------------------
SESSIONS = Sessions()


def _session(request: gr.Request | None) -> str:
    return getattr(request, "session_hash", None) or "local"


# -- helpers ---------------------------------------------------------------------------------------------------
def _models(names, runtime: str | None = None) -> list[str]:
    return offered_members(names, MODEL_CHOICES, runtime, RUNTIME, RUNTIME_CHOICES)


def build_settings(method: str, values: dict) -> Settings:
    """Settings from the UI or API; 'auto' and empty values mean the method's default."""
    data = {k: v for k, v in (values or {}).items() if v not in (None, "", "auto")}
    return Settings.from_dict(data)


def load_models(names: list[str], progress=None) -> list:
    def report(message: str, fraction: float | None) -> None:
        if progress is not None:
            progress(fraction if fraction is not None else 0.0, desc=message)

    return POOL.get_many(names, report)  # one run's models never evict each other from the pool's budget


def _backend_for(models: list):
    """A single model runs in process when its weights are here (a member process would only add a round trip
    per token); on a process backend this process holds no weights, so everything runs there."""
    return BACKEND if len(models) > 1 or not POOL.weights else None


def _final_views(trace: RunTrace, strip: str, status: str) -> RunView:
    """Every view of a finished (or uploaded) trace."""
    specem = bool(trace.method == "specem" and trace.rounds)
    last_round = max(0, len(trace.rounds) - 1)
    return RunView(
        strip=strip,
        status=visual.status_html(status),
        legend=visual.trace_legend(trace),
        stats=visual.stats_html(trace),
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


# -- run tab ---------------------------------------------------------------------------------------------------
@gpu
def run_stream(prompt, method, model_names, drafter, settings_values: dict, request: gr.Request, progress=gr.Progress(),
               runtime: str | None = None):
    """Stream one run: the strip grows append-only, the other views fill in at the end.

    ``settings_values`` maps a setting's name to its control's value (``ui.controls``)."""
    session = SESSIONS.get(_session(request))
    cancel = session["cancel"]
    cancel.clear()
    session["shown"] = None  # how many tokens the browser's strip held when Stop was clicked (stop_run_at)
    # Every yield sends the whole view; Gradio diffs it against the last one, so unchanged outputs cost
    # nothing and the strip, which only ever grows, goes out as an "append" of its new tokens.
    view = RunView(strip="", status=visual.status_html("Loading models…"), legend="", stats="", token_table=None,
                   token_filter="all", rounds="", heatmap=None, weights_plot=None, round_slider=gr.update(value=0),
                   specem_view=gr.update(visible=False), weights_note="", fork_view="")
    try:
        clean_prompt(prompt)  # fails fast; the run cleans the prompt again and keeps the warnings in its trace
        names = _models(model_names, runtime)
        bases = [split_runtime(n)[0] for n in names]
        extra = {"drafter": drafter if drafter in bases else None} if method == "safe" and drafter else {}
        settings = settings_from_controls(settings_values, **extra)
        settings.validate(method, bases)
        yield view
        models = load_models(names, progress)
        job = EnsembleRun(models, prompt, method, settings, cancel=cancel, backend=_backend_for(models))
    except EnsembleError as exc:
        yield view._replace(strip=visual.error_html(str(exc)), status=visual.status_html(f"⚠️ {exc}"))
        return
    session["job"], session["trace"] = job, None
    running = visual.status_html(" · ".join(job.trace.warnings) or f"Running {method} on {', '.join(job.trace.models)}…")
    started = view._replace(status=running, legend=visual.legend_html(method, job.trace.models, job.trace.settings))
    yield started
    view, builder, pending = started, visual.StripBuilder(method, job.trace.models), []
    try:
        for view in _stream_tokens(job, started, running, builder, pending):
            yield view
    except Exception as exc:  # noqa: BLE001 - a failing model must not take the app down
        session["job"], session["trace"] = None, job.trace  # the partial trace stays inspectable
        if pending:  # what was committed before the failure goes on the strip too
            view = view._replace(strip=view.strip + builder.add(pending, job.run.text))
        kind = "" if isinstance(exc, EnsembleError) else f"The run failed: {type(exc).__name__}: "
        # every view of the partial trace (its stats, table, rounds), the failure in the status line
        yield _final_views(job.trace, view.strip, f"⚠️ {kind}{exc}. Other runs are not affected." if kind else f"⚠️ {exc}")
        return
    if cancel.is_set():  # Stop: the strip and the trace stay as they were at the click
        job.withdraw(visual.records_drawn(job.trace.tokens, session["shown"]) if session["shown"] is not None
                     else len(job.trace.tokens) - len(pending))
        view = view._replace(strip=visual.strip_html(job.trace))
    elif pending:
        view = view._replace(strip=view.strip + builder.add(pending, job.run.text))
    trace = job.trace
    # Keep the trace, drop the run: its adapters hold every model's KV cache.
    session["job"], session["trace"] = None, trace
    yield _final_views(trace, view.strip, _done_message(trace))


def _stream_tokens(job: EnsembleRun, view: RunView, running: str, builder: visual.StripBuilder, pending: list):
    """The run's views as its events come: committed tokens about 5 times a second, SpecEM's drafts meanwhile.
    Tokens not sent yet are left in ``pending`` (the caller adds them to the final view)."""
    last = 0.0
    for event in job.events():
        if isinstance(event, TokenEvent):
            pending.append(event.record)
        elif isinstance(event, StatusEvent):  # drafts shown before they are decided (SpecEM's vote, SAFE's first round)
            if pending:  # committed tokens go out first: what is on the strip is all that was decided
                view = view._replace(strip=view.strip + builder.add(pending, job.run.text))
                pending.clear()
                last = time.perf_counter()
            view = view._replace(status=visual.status_html(event.message))
            yield view
            continue
        elif isinstance(event, RoundEvent):
            view = view._replace(status=running)
        now = time.perf_counter()
        if job.run.cancel.is_set():
            continue  # Stop was clicked: nothing more goes to the strip (the run ends at its next check)
        if pending and (now - last >= STREAM_INTERVAL or isinstance(event, RoundEvent)):
            view = view._replace(strip=view.strip + builder.add(pending, job.run.text))
            pending.clear()
            last = now
            yield view


def _done_message(trace: RunTrace) -> str:
    s = trace.stats
    done = (
        f"Done: {s.generated_tokens} tokens, E/T {et_text(s.et_ratio, trace.method, s.rounds)}, {s.latency_s:.1f} s, "
        f"{s.tokens_per_s:.2f} tokens/s "
        f"(stop: {s.stop_reason}). Click any token to see why."
    )
    if s.stop_reason == "cancelled":
        done = f"Stopped after {s.generated_tokens} tokens ({s.latency_s:.1f} s). Click any token to see why."
    if trace.warnings:
        done = " · ".join(trace.warnings) + " · " + done
    return done


@contextlib.contextmanager
def busy(request: gr.Request | None):
    """Marks the session's run, comparison or fork as streaming (so Stop knows whether anything is)."""
    session = SESSIONS.get(_session(request))
    session["busy"] += 1
    try:
        yield
    finally:
        session["busy"] -= 1


def stop_run(request: gr.Request):
    session = SESSIONS.get(_session(request))
    if not session["busy"]:
        return visual.status_html("Nothing is running: Stop ends a run, a comparison or a fork while it streams.")
    session["cancel"].set()
    return visual.status_html("Stopping…")


def stop_run_at(shown, request: gr.Request):
    """The Run tab's Stop: ``shown`` is how many tokens the browser's strip held at the click (counted by the
    button's ``js``, :data:`ui.tabs.STRIP_COUNT_JS`); the run keeps exactly those."""
    session = SESSIONS.get(_session(request))
    if session["busy"] and isinstance(shown, int | float) and 0 <= shown < 10**7:
        session["shown"] = int(shown)
    return stop_run(request)


def filter_tokens(decision, request: gr.Request):
    """The per-token table of the session's trace, only the tokens of ``decision`` ("all": every token)."""
    trace = SESSIONS.trace(_session(request))
    return visual.token_frame(trace, decision) if trace is not None else gr.skip()


def inspect(request: gr.Request, evt: gr.EventData) -> InspectView:
    trace = SESSIONS.trace(_session(request))
    index = getattr(evt, "index", None)  # what the strip's click handler passed to trigger('click', {index})
    if trace is None or not isinstance(index, int) or not 0 <= index < len(trace.tokens):
        return InspectView(explanation="<p>Run the ensemble or load a trace, then click a token.</p>")
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
    def answer():
        trace, index = SESSIONS.trace(_session(request)), getattr(evt, "index", None)
        valid = trace is not None and isinstance(index, int) and 0 <= index < len(trace.tokens)
        return inspect(request, evt), {"selected": (trace, index) if valid else None}

    return if_newest(SESSIONS, _session(request), "strip", evt, answer)


def fork_selected(method, runtime, request: gr.Request, force: str | None = None):
    """Continue the shown run from the selected token with ``method`` (``ui.forking``); the run must be finished."""
    session = SESSIONS.get(_session(request))
    trace = session["trace"] if session["job"] is None else None
    selected, index = session.get("selected") or (None, None)
    load = lambda names: load_models(_models(names, runtime))  # noqa: E731 - the names the app offers only
    yield from fork_stream(trace, index if selected is trace else None, method, load, _backend_for, session["cancel"], force)


def show_round(round_index, request: gr.Request):
    trace = SESSIONS.trace(_session(request))
    if trace is None or not trace.rounds:
        return None
    return visual.score_heatmap(trace, min(int(round_index or 0), len(trace.rounds) - 1))


def form_of(trace: RunTrace) -> dict:
    """The Run form's values that re-run an uploaded trace: prompt, method, the offered models among its own (the
    drafter first, so the drafter box follows it), engine settings (values their declarations refuse are left out)."""
    names = list(dict.fromkeys(split_runtime(re.sub(r"#\d+$", "", m))[0] for m in trace.models))
    names = [n for n in names if n in MODEL_CHOICES]
    if trace.drafter in names:
        names.remove(trace.drafter)
        names.insert(0, trace.drafter)
    form = {"prompt": trace.prompt, "method": trace.method if trace.method in METHODS else None, "models": names or None}
    return form | {"settings": control_values(trace.settings)}


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


_FIRST: list[RunTrace] = []


def first_view(request: gr.Request) -> RunView:
    """The recorded run of the first example (``ui.tabs.FIRST_VIEW``), replayed on load so every view shows
    something before anything runs; labelled as a recording. A session that already has a run keeps it."""
    if not _FIRST:
        _FIRST.append(RunTrace.from_json(tabs.FIRST_VIEW.read_bytes()))
    trace = _FIRST[0]
    session = SESSIONS.get(_session(request))
    if session["job"] is not None or session["trace"] is not None:
        return RunView()
    asked = (getattr(request, "query_params", None) or {}).get("prompt")
    if asked and asked != trace.prompt:  # a link opened another prompt: the recording is not of it
        return RunView(status=visual.status_html("A link filled in this prompt and its settings: press Run to run it."))
    session["trace"] = trace
    status = space.first_view_status(trace.method, trace.models, trace.created, RUNTIME, DEVICE, POOL.unavailable)
    return _final_views(trace, visual.strip_html(trace), status)


def update_drafter(model_names):
    names = [n for n in (model_names or [])]
    return gr.update(choices=names, value=names[0] if names else None)


# -- tokenizer tab --------------------------------------------------------------------------------------------
def tokenize_view(text, model_names, show_whitespace, show_ids=False) -> TokenizerView:
    try:
        names = _models(model_names)
        comparison = compare(text or "", {name: POOL.keys(name) for name in names})
    except EnsembleError as exc:
        return TokenizerView(visual.error_html(str(exc)), None)
    return TokenizerView(visual.tokenizers_html(comparison, show_whitespace=bool(show_whitespace), show_ids=bool(show_ids)),
                         visual.tokenizer_counts_frame(comparison))


def tokenizers_page(text, model_names, show_ids=False) -> str:
    """The aligned tokenizer view as one self-contained HTML file (its path, for download)."""
    try:
        names = _models(model_names)
        comparison = compare(text or "", {name: POOL.keys(name) for name in names})
    except EnsembleError as exc:
        raise gr.Error(str(exc)) from exc
    page = Path(tempfile.mkdtemp(prefix="ensemble-lens-")) / "tokenizers.html"
    page.write_text(visual.tokenizers_document(comparison, show_ids=bool(show_ids)), encoding="utf-8")
    return str(page)


# -- compare tab ----------------------------------------------------------------------------------------------
@gpu
def compare_stream(prompt, methods, model_names, max_new_tokens, request: gr.Request, progress=gr.Progress(),
                   settings_values: dict | None = None, drafter=None):
    """Run 2-4 methods one after another on one prompt with the Run tab's engine settings (``settings_values``)
    and this tab's token budget; the cards, table and chart grow as each finishes, a status line says which
    runs now and how far it is."""
    try:
        clean_prompt(prompt)
        methods = [m for m in (methods or []) if m in METHODS]
        if not 2 <= len(methods) <= 4:
            raise InputError("Pick two to four methods to compare.")
        names = _models(model_names)
        bases = [split_runtime(n)[0] for n in names]
        extra = {"max_new_tokens": int(max_new_tokens), "drafter": drafter if drafter in bases else None}
        settings = {m: settings_from_controls(settings_values or {}, **extra) for m in methods}
        for method, config in settings.items():
            config.validate(method, bases)
        models = load_models(names, progress)
    except (EnsembleError, ValueError, TypeError) as exc:
        yield CompareView(visual.error_html(str(exc)), cmp_status=visual.status_html(f"⚠️ {exc}"))
        return
    session = SESSIONS.get(_session(request))
    cancel = session["cancel"]
    cancel.clear()
    traces: dict[str, RunTrace] = {}
    session["compare"] = traces  # what a click on a card's token inspects
    view = CompareView(cmp_html=None)
    for i, method in enumerate(methods, start=1):
        job = EnsembleRun(models, prompt, method, settings[method], cancel=cancel, backend=_backend_for(models))
        running = f"Running {method} ({i} of {len(methods)}) on {', '.join(job.trace.models)}"
        yield view._replace(cmp_status=visual.status_html(running + "…"))
        last = time.perf_counter()
        try:
            for event in job.events():
                if isinstance(event, TokenEvent) and time.perf_counter() - last > 1.0:
                    last = time.perf_counter()
                    yield view._replace(cmp_status=visual.status_html(f"{running}: {len(job.trace.tokens)} tokens so far…"))
        except Exception as exc:  # noqa: BLE001 - show the failure, keep the other methods
            yield view._replace(cmp_view=visual.error_html(f"{method} failed: {exc}"), cmp_status=visual.status_html(f"⚠️ {method} failed"))
            return
        traces[method] = job.trace
        share = f"{66 / len(traces):.0f}%"  # percentages: the table fits its box, long cells wrap (a phone too)
        table = gr.update(value=visual.compare_frame(traces), column_widths=["34%", *[share] * len(traces)])
        view = CompareView(visual.compare_html(traces), table, visual.compare_figure(traces))
        if cancel.is_set() or len(traces) == len(methods):
            page = Path(tempfile.mkdtemp(prefix="ensemble-lens-")) / f"compare-{'-'.join(traces)}.html"
            page.write_text(visual.compare_document(traces), encoding="utf-8")
            done = "Stopped" if cancel.is_set() else "Done"
            yield view._replace(cmp_html=str(page), cmp_status=visual.status_html(
                f"{done}: {', '.join(traces)}. Click any token in a card to see why."))
            return
        yield view


def inspect_compared(request: gr.Request, evt: gr.EventData):
    """The explanation of a token clicked in a Compare card (the card's run, ``data-run``)."""
    traces = SESSIONS.get(_session(request)).get("compare") or {}
    data = click_data(evt)
    trace, index = traces.get(data.get("run")), data.get("index")
    if trace is None or not isinstance(index, int) or not 0 <= index < len(trace.tokens):
        return '<p class="el-muted">Compare runs, then click a token in a card.</p>'
    return (f'<p><b>{visual.safe(visual.compare_label(trace))}</b></p>' + visual.explain(trace, index)
            + visual.tokenization_html(trace, index))


# -- trace tab ------------------------------------------------------------------------------------------------
def export_trace(request: gr.Request) -> ExportView:
    trace = SESSIONS.trace(_session(request))
    if trace is None:
        raise gr.Error("Nothing to export yet: run the ensemble or load a trace first.")
    folder = Path(tempfile.mkdtemp(prefix="ensemble-lens-"))
    stamp = time.strftime("%Y%m%d-%H%M%S")
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
        SESSIONS.get(_session(request))["imported"] = None
        return RunView(strip=visual.error_html(str(exc)), status=visual.status_html(f"⚠️ Could not load the trace: {exc}"))
    session = SESSIONS.get(_session(request))
    session["job"], session["trace"], session["imported"] = None, trace, trace
    # Everything in an uploaded trace is untrusted: the status line escapes it like every other view.
    status = f"Replaying a {trace.method} trace of {', '.join(trace.models)} ({len(trace.tokens)} tokens). Click any token."
    return _final_views(trace, visual.strip_html(trace), status)


# -- results tab (ui.results) -----------------------------------------------------------------------------------
COMMITTED_RESULTS = project_file("docs/results/gsm8k-summary.csv")
show_results = results_ui.show_summary


# -- API for scripts ------------------------------------------------------------------------------------------
def run_ensemble(prompt: str, method: str = "safe", models: str = ",".join(DEFAULT_ENSEMBLE), settings: dict | None = None) -> dict:
    """Run a method on a prompt and return the full trace as JSON.

    Args:
        prompt: the user prompt.
        method: single | unite | gac | safe | specem.
        models: comma-separated model names (embedded: qwen, smollm2, gemma3; or hub ids / local folders).
        settings: engine options as a JSON object, e.g. {"max_new_tokens": 64, "lookahead": 5, "fusion": "gac"}.
    """
    job = None
    try:
        settings = settings_object(settings)
        clean_prompt(prompt)
        names = _models(models)
        config = build_settings(method, settings or {})
        config.validate(method, [split_runtime(n)[0] for n in names])  # a run's members are named without @runtime
        job = EnsembleRun(models := load_models(names), prompt, method, config, backend=_backend_for(models))
        for _ in job.events():
            pass
    except MemberDied as exc:  # the trace so far, as the browser keeps it: stop_reason "member_failed", error says who
        if job is None:
            raise gr.Error(str(exc)) from exc
        return job.trace.to_dict()
    except (EnsembleError, ValueError) as exc:
        raise gr.Error(str(exc)) from exc
    except Exception as exc:
        raise gr.Error(f"The run failed: {type(exc).__name__}: {exc}") from exc
    return job.trace.to_dict()


def fork(trace: dict, at: int, method: str = "", force: str = "") -> dict:
    """Continue a run's trace from its token ``at`` with ``method`` and compare: {"fork": trace, "comparison": …}.

    Args:
        trace: a trace as JSON (what run_ensemble returns); its models must be ones this app offers.
        at: the token number to re-decide (0 rewrites the whole answer).
        method: drafter (the run's drafter alone; the default) | single | unite | gac | safe | specem; with
            ``force``, the default is the run's own method.
        force: a key (its exact text, e.g. " F") to put at token ``at`` instead of the run's; the method goes on.
    """
    try:
        parent = read_trace(trace)
        at = token_number(at, "at")  # "3" is token #3; run_fork says which tokens a fork may start from
        method = fork_method_for(parent, method, force)
        models = load_models(_models(member_names(parent, method)))
        forked, comparison = run_fork(models, parent, at, method, force=force, backend=_backend_for(models))
    except (EnsembleError, ValueError, TypeError) as exc:
        raise gr.Error(str(exc)) from exc
    return {"fork": forked.to_dict(), "comparison": comparison.to_dict()}


def explain_token(trace: dict, index: int) -> dict:
    """Why the ensemble chose token ``index`` of a trace, in plain words, with the token's full record.

    Args:
        trace: a trace as JSON (what run_ensemble returns, or a saved trace file's content).
        index: the token's number in the trace (0 = the first token of the answer).

    Returns:
        {"index", "text" (the token's characters), "decision", "explanation" (plain text), "record" (raw JSON)}.
    """
    try:
        parsed = read_trace(trace)  # in a reader thread, with a time limit
        index = token_number(index, "index", len(parsed.tokens))  # "1" is token #1
    except (EnsembleError, ValueError, TypeError) as exc:
        raise gr.Error(str(exc)) from exc
    record = parsed.tokens[index]
    return {"index": index, "text": parsed.text[record.start : record.end], "decision": str(record.decision),
            "explanation": visual.explain_text(parsed, index), "record": visual.inspector_json(parsed, index)}


def tokenize(text: str, models: str = ",".join(DEFAULT_MODELS)) -> dict:
    """Compare how the models' tokenizers cut a text: each model's tokens with spans, the boundaries they share,
    the boundaries each lacks, and the agreement in percent.

    Args:
        text: any text (names, numbers, emoji, CJK and code show the mismatches best).
        models: comma-separated tokenizer names (embedded: qwen, smollm2, gemma3).
    """
    try:
        names = _models(models)
        return compare(text, {name: POOL.keys(name) for name in names})
    except EnsembleError as exc:
        raise gr.Error(str(exc)) from exc


# -- layout and wiring ------------------------------------------------------------------------------------------
INTRO = """# 🔍 Ensemble Lens
Run several small language models **as one ensemble** and see, token by token, why the ensemble did what it
did: where **SAFE** fused their distributions, where a **tokenizer mismatch** made fusing unsafe, where the
models already agreed, and how **SpecEM** weighs whole segments. Click any token for the reason."""


def build_app() -> gr.Blocks:
    models = MODEL_CHOICES
    with gr.Blocks(title="Ensemble Lens") as demo:
        gr.Markdown(INTRO)
        projector = gr.Checkbox(False, label="Projector mode: large text", elem_id="projector", container=False)
        projector.change(None, inputs=[projector], js=tabs.PROJECTOR_JS)
        with gr.Tabs() as tab_box:
            with gr.Tab("Run", id="run"):
                run = tabs.build_run_tab(models, RUNTIME_CHOICES, RUNTIME)
            with gr.Tab("Tokenizers", id="tokenizers"):
                tok = tabs.build_tokenizer_tab(models, list(DEFAULT_MODELS))
            with gr.Tab("Compare", id="compare"):
                cmp = tabs.build_compare_tab(models, list(DEFAULT_ENSEMBLE))
            with gr.Tab("Trace", id="trace"):
                trace = tabs.build_trace_tab()
            with gr.Tab("Results", id="results"):
                results = tabs.build_results_tab(COMMITTED_RESULTS.exists())
        wire_run_tab(run, trace)
        opened = wire_links(demo, tab_box, run, tok, projector)
        wire_other_tabs(opened, run, tok, cmp, trace, results)
        wire_results_tab(results, run, tab_box)
        gr.api(run_ensemble, api_name="run_ensemble", concurrency_id="engine", concurrency_limit=RUN_CONCURRENCY)
        gr.api(fork, api_name="fork", concurrency_id="engine", concurrency_limit=RUN_CONCURRENCY)
        gr.api(tokenize, api_name="tokenize", concurrency_id="tokenize", concurrency_limit=4)
        gr.api(explain_token, api_name="explain_token", concurrency_id="tokenize")
        gr.api(results_ui.explain_answers, api_name="explain_answers", concurrency_id="tokenize")
        gr.api(results_ui.explain_run, api_name="explain_run", concurrency_id="tokenize")
    demo.queue(max_size=QUEUE_SIZE, default_concurrency_limit=RUN_CONCURRENCY)
    return demo


def wire_run_tab(run: tabs.RunTab, trace: tabs.TraceTab) -> None:
    """The Run tab's events: run (button or Enter), stop, click a token, pick a round; and a trace upload,
    which fills the same views."""
    names = list(run.controls)
    inputs = [run.prompt, run.method, run.model_box, run.drafter, run.runtime, *run.controls.values()]

    def on_run(request: gr.Request, progress=gr.Progress(), *values):  # Gradio fills request and progress first
        prompt, method, model_names, drafter, runtime, *settings = values
        chosen = dict(zip(names, settings, strict=True))
        with busy(request):
            for view in run_stream(prompt, method, model_names, drafter, chosen, request, progress, runtime=runtime):
                yield updates(run, view)

    run_outputs = outputs(run, RunView)
    run.run_button.click(on_run, inputs=inputs, outputs=run_outputs, concurrency_limit=RUN_CONCURRENCY,
                         concurrency_id="engine", api_name="run_stream", api_visibility="private")  # scripts/app_latency.py
    run.prompt.submit(on_run, inputs=inputs, outputs=run_outputs, concurrency_id="engine", api_visibility="private")
    for starts in (run.run_button.click, run.prompt.submit):  # the last run's inspector goes with its strip
        starts(lambda: updates(run, cleared_inspector()), outputs=outputs(run, InspectView), queue=False,
               api_visibility="private")
    # Stop sets the session's flag (outside the queue, so it runs at once); the engine checks it before every
    # forward pass and ends the run cleanly, so the partial trace stays complete and the worker is free.
    run.stop_button.click(stop_run_at, inputs=[run.strip_count], outputs=[run.status], queue=False, js=tabs.STRIP_COUNT_JS,
                          api_visibility="private")

    def on_click(request: gr.Request, evt: gr.EventData):
        view = inspect_latest(request, evt)
        return {c: gr.skip() for c in outputs(run, InspectView)} if view is None else updates(run, view)

    # every click runs (quick clicks or ←/→ held down); an answer overtaken by a newer click is dropped, so the
    # explanation always ends on the last token clicked (Gradio's always_last would replay the first click's data)
    run.strip.click(on_click, outputs=outputs(run, InspectView), concurrency_limit=None, api_visibility="private",
                    trigger_mode="multiple")
    run.round_slider.change(show_round, inputs=[run.round_slider], outputs=[run.heatmap], api_visibility="private")
    run.token_filter.input(filter_tokens, inputs=[run.token_filter], outputs=[run.token_table], api_visibility="private")
    run.model_box.change(update_drafter, inputs=[run.model_box], outputs=[run.drafter], api_visibility="private")
    run.method.change(lambda method: gr.update(visible=method == "safe"), inputs=[run.method], outputs=[run.drafter],
                      api_visibility="private")  # the drafter box is SAFE's
    run.examples.click(lambda: gr.update(open=False), outputs=[run.examples_box], api_visibility="private")
    for starts in (run.run_button.click, run.prompt.submit):
        starts(None, js=tabs.SCROLL_TO_STRIP_JS)

    def on_fork(method, runtime, request: gr.Request):
        with busy(request):
            for view in fork_selected(method, runtime, request):
                yield updates(run, view)

    run.fork_button.click(on_fork, inputs=[run.fork_method, run.runtime], outputs=outputs(run, ForkView),
                          concurrency_id="engine", api_visibility="private")

    def on_whatif(runtime, request: gr.Request, evt: gr.EventData):
        with busy(request):
            for view in fork_selected(None, runtime, request, getattr(evt, "key", None)):
                yield updates(run, view)

    run.whatif.click(on_whatif, inputs=[run.runtime], outputs=outputs(run, ForkView), concurrency_id="engine",
                     api_visibility="private")

    def on_upload(file, request: gr.Request):
        view = import_trace(file, request)
        loaded = SESSIONS.get(_session(request)).pop("imported", None)
        if loaded is None:  # refused: the reason shows where the file was chosen; the Run tab stays as it was
            return {trace.trace_status: view.status}
        filled = form_updates(run, loaded)
        done = visual.status_html(f"Loaded: the Run tab replays this {loaded.method} trace ({len(loaded.tokens)} tokens); "
                                  "its prompt, method, models and settings fill the form, so Run runs it again.")
        return updates(run, view) | updates(run, cleared_inspector()) | filled | {trace.trace_status: done}

    form_outputs = [run.prompt, run.method, run.model_box, run.drafter, *run.controls.values()]
    trace.upload.upload(on_upload, inputs=[trace.upload],
                        outputs=[*run_outputs, *outputs(run, InspectView), trace.trace_status, *form_outputs],
                        api_visibility="private")


def wire_other_tabs(opened, run: tabs.RunTab, tok: tabs.TokenizerTab, cmp: tabs.CompareTab, trace: tabs.TraceTab,
                    results: tabs.ResultsTab) -> None:
    tok_inputs = [tok.tok_text, tok.tok_models, tok.tok_ws, tok.tok_ids]

    def on_tokenize(text, model_names, show_whitespace, show_ids):
        return updates(tok, tokenize_view(text, model_names, show_whitespace, show_ids))

    tok.tok_button.click(on_tokenize, inputs=tok_inputs, outputs=outputs(tok, TokenizerView), concurrency_id="tokenize",
                         concurrency_limit=4, api_visibility="private")
    tok.tok_save.click(tokenizers_page, inputs=[tok.tok_text, tok.tok_models, tok.tok_ids], outputs=[tok.tok_html],
                       concurrency_id="tokenize", api_visibility="private")
    for switch in (tok.tok_ws, tok.tok_ids):
        switch.change(on_tokenize, inputs=tok_inputs, outputs=outputs(tok, TokenizerView), concurrency_id="tokenize",
                      api_visibility="private")

    controls = list(run.controls)

    def on_compare(request: gr.Request, progress=gr.Progress(), *values):
        prompt, methods, model_names, max_new_tokens, drafter, *settings = values
        chosen = dict(zip(controls, settings, strict=True))
        with busy(request):
            for view in compare_stream(prompt, methods, model_names, max_new_tokens, request, progress, chosen, drafter):
                yield updates(cmp, view)

    cmp.cmp_button.click(on_compare, inputs=[cmp.cmp_prompt, cmp.cmp_methods, cmp.cmp_models, cmp.cmp_tokens, run.drafter,
                                             *run.controls.values()],
                         outputs=outputs(cmp, CompareView), concurrency_id="engine", api_visibility="private")
    def on_compare_click(request: gr.Request, evt: gr.EventData):
        html = if_newest(SESSIONS, _session(request), "compare", evt, lambda: (inspect_compared(request, evt), {}))
        return gr.skip() if html is None else html

    cmp.cmp_view.click(on_compare_click, outputs=[cmp.cmp_inspect], concurrency_limit=None, api_visibility="private",
                       trigger_mode="multiple")  # as the strip's clicks: the newest click's answer wins
    cmp.cmp_stop.click(stop_run, outputs=[cmp.cmp_status], queue=False, api_visibility="private")

    def on_export(request: gr.Request):
        return updates(trace, export_trace(request))

    trace.export_button.click(on_export, outputs=outputs(trace, ExportView), api_visibility="private")
    opened.then(on_tokenize, inputs=tok_inputs, outputs=outputs(tok, TokenizerView), api_visibility="private")

    def on_load(request: gr.Request):
        return updates(run, first_view(request))

    opened.then(on_load, outputs=outputs(run, RunView), api_visibility="private")


def wire_results_tab(results: tabs.ResultsTab, run: tabs.RunTab, tab_box: gr.Tabs) -> None:
    """Open an evaluation, filter its grid, open a cell in the Run tab, compare two answers (``ui.results``)."""
    shown = [*outputs(results, ResultsView), *outputs(results, results_ui.ExplorerView)]

    def on_open(path, request: gr.Request):
        summary, explorer, folder = results_ui.open_evaluation(path) if path else (show_results(None), results_ui.ExplorerView(), None)
        SESSIONS.get(_session(request))["evaluation"] = folder
        return updates(results, summary) | updates(results, explorer)

    results.results_file.upload(on_open, inputs=[results.results_file], outputs=shown, api_visibility="private")
    def on_ours(request: gr.Request):
        return on_open(results_ui.COMMITTED_RUN, request)

    def on_filter(kind, ensemble, order, request: gr.Request):
        return results_ui.filtered_grid(SESSIONS.get(_session(request)).get("evaluation"), kind, ensemble, order)

    def on_part(qid, a, b, request: gr.Request):
        return results_ui.parting_view(SESSIONS.get(_session(request)).get("evaluation"), qid, a, b)

    results.results_ours.click(on_ours, outputs=shown, api_visibility="private")
    grid_inputs = [results.grid_filter, results.grid_ensemble, results.grid_order]
    for control in grid_inputs:
        control.input(on_filter, inputs=grid_inputs, outputs=[results.grid], api_visibility="private")

    def on_cell(request: gr.Request, evt: gr.EventData):
        session = SESSIONS.get(_session(request))
        trace, note = results_ui.open_cell(session.get("evaluation"), click_data(evt))
        if trace is None:
            return {results.cell_note: note}
        session["job"], session["trace"] = None, trace
        status = f"Replaying a {trace.method} answer of the evaluation ({len(trace.tokens)} tokens). Click any token."
        return (updates(run, _final_views(trace, visual.strip_html(trace), status)) | updates(run, cleared_inspector())
                | form_updates(run, trace) | {results.cell_note: note, tab_box: gr.Tabs(selected="run")})

    form_outputs = [run.prompt, run.method, run.model_box, run.drafter, *run.controls.values()]
    opened = results.grid.click(on_cell, outputs=[*outputs(run, RunView), *outputs(run, InspectView), *form_outputs,
                                                  results.cell_note, tab_box], api_visibility="private")
    opened.then(None, js=tabs.SCROLL_TO_STRIP_JS)  # the grid was scrolled far down: the answer's strip comes into view
    results.part_button.click(on_part, inputs=[results.part_qid, results.part_a, results.part_b], outputs=[results.part_view],
                              api_visibility="private")


def wire_links(demo: gr.Blocks, tab_box: gr.Tabs, run: tabs.RunTab, tok: tabs.TokenizerTab, projector: gr.Checkbox):
    """The URL: opening a link restores what it holds (``ui.links``); Copy link (Run and Tokenizers tabs) writes
    the form into one. Returns the page-load event (what else runs on load follows it, with the restored values)."""
    controls = list(run.controls)

    def on_link(large, prompt, method, models, *values):
        return links.link_query("run", prompt, method, models or [], dict(zip(controls, values, strict=True)), large)

    def on_tok_link(large, text, models, show_whitespace, ids):
        return links.tokenizer_query(text, models or [], ids, show_whitespace, large)

    for button, box, handler, inputs in (
        (run.link_button, run.link_box, on_link, [projector, run.prompt, run.method, run.model_box, *run.controls.values()]),
        (tok.tok_link_button, tok.tok_link_box, on_tok_link, [projector, tok.tok_text, tok.tok_models, tok.tok_ws, tok.tok_ids]),
    ):
        shown = button.click(handler, inputs=inputs, outputs=[box], api_visibility="private", queue=False)
        shown.then(lambda url: gr.update(value=url, visible=True), inputs=[box], outputs=[box], js=links.SHARE_JS,
                   api_visibility="private", queue=False)

    restored = [tab_box, run.prompt, run.method, run.model_box, tok.tok_text, tok.tok_models, tok.tok_ws, tok.tok_ids,
                projector, *run.controls.values()]

    def on_open(request: gr.Request):
        asked = links.form_from_query(dict(getattr(request, "query_params", {}) or {}), MODEL_CHOICES)
        out = {c: gr.skip() for c in restored}  # (an empty dict would read as one value)
        if POOL.unavailable:  # a model the server could not load (gemma3 without HF_TOKEN on a Space) is not a default
            out[run.model_box] = space.usable(tabs.EXAMPLES[0][2], POOL.unavailable)
            out[tok.tok_models] = space.usable(DEFAULT_MODELS, POOL.unavailable)
        out.update({run.controls[k]: v for k, v in asked.get("settings", {}).items()})
        for key, component in (("prompt", run.prompt), ("method", run.method), ("text", tok.tok_text),
                               ("tok_models", tok.tok_models), ("ws", tok.tok_ws), ("ids", tok.tok_ids), ("large", projector)):
            if key in asked:
                out[component] = asked[key]
        if "models" in asked:
            out[run.model_box] = asked["models"]
        if "tab" in asked:
            out[tab_box] = gr.Tabs(selected=asked["tab"])
        return out

    return demo.load(on_open, outputs=restored, api_visibility="private")


def warm_up() -> None:
    """Load the default models (and start their member processes) before serving, so the first run streams at once."""
    for problem in warm(POOL, DEFAULT_MODELS, BACKEND):  # the runs will say so too; the app keeps serving
        print(f"[app] {problem}", flush=True)
    print(f"[app] member backend: {BACKEND.describe()} ({BACKEND_WHY})", flush=True)
    print(f"[app] runtime: {RUNTIME} (loaded: {', '.join(POOL.loaded()) or 'none'})", flush=True)


demo = build_app()


def launch(port: int | None = None, block: bool = True, host: str | None = None):
    """Serve the app (``block=False`` returns at once: tests and scripts use it)."""
    space.quiet_spaces_reloader(importlib.import_module("gradio.http_server"))
    return demo.launch(
        server_name=host or os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"),
        server_port=port or int(os.environ.get("GRADIO_SERVER_PORT", "7860")),
        css=visual.CSS,
        js=links.KEYS_JS,
        theme=gr.themes.Soft(),
        prevent_thread_lock=not block,
        quiet=not block,
        mcp_server=MCP_SERVER,  # streamable HTTP at /gradio_api/mcp/ (the README shows a client's config)
    )


def main() -> None:
    """Serve until stopped: ``python app.py`` (a Space starts it so) and the ``ensemble-lens`` command."""
    interrupt_on_sigterm()  # `kill PID` stops the server as Ctrl-C does, and the member processes with it
    if os.environ.get("ENSEMBLE_LENS_NO_WARMUP") != "1":
        warm_up()
    try:
        launch()
    finally:
        close_backends()  # the member processes (and a Ray cluster this process started) end with the app


if __name__ == "__main__":
    main()
