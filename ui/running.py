"""A run in the Run tab: its preflight, its stream of views (throttled to about 5 a second), the Stop protocol, and
the "what if" forks of the shown run.

Stop: the button sets the session's flag outside the queue (``stop_run_at``), with the number of tokens the
browser's strip held at the click; the engine checks the flag before every forward pass and ends the run cleanly,
and the run keeps exactly the tokens the browser showed (``EnsembleRun.withdraw``). ``busy`` marks what streams,
so Stop knows whether anything does.
"""

from __future__ import annotations

import contextlib
import time

import gradio as gr

import visual
from ensemble.capabilities import verifies_drafter
from ensemble.errors import EnsembleError
from ensemble.members.home import homed
from ensemble.methods import DraftEvent, EnsembleRun, RoundEvent, StatusEvent, TokenEvent
from ensemble.preflight import preflight
from ensemble.trace import RunTrace
from ensemble.trace.readable import STOP_WORDS, ensembled_text
from ui import config
from ui.controls import settings_from_controls
from ui.forking import fork_stream
from ui.replay import final_views
from ui.view_tuples import RunView

STREAM_INTERVAL = 0.2  # seconds between streamed updates (about 5 per second)


class Pending:
    """What is not on the strip yet: committed tokens (``records``, drawn from the newest event's ``text``) and SAFE's
    drafts being checked, in the order they came; ``verified`` is the strip of the verified tokens alone."""

    def __init__(self, builder: visual.StripBuilder):
        self.builder, self.records, self.text = builder, [], ""
        self.ready, self.verified = "", ""  # HTML in order, not sent yet; the strip without drafts
        self.shown = 0  # where the text drawn on the strip (and in ``ready``) ends, verified or drafted
        self.unsent = 0  # records drawn into ``ready``

    @property
    def waiting(self) -> bool:
        return bool(self.records or self.ready)

    @property
    def not_sent(self) -> int:
        """Committed records not on the browser's strip yet."""
        return len(self.records) + self.unsent

    def add(self, event: TokenEvent) -> None:
        self.records.append(event.record)
        self.text = event.text

    def add_draft(self, event: DraftEvent) -> None:
        """A drafted token, drawn as being checked; with it any committed text no record has released yet (records
        wait while a stop string could still cut them), so the draft is shown where it stands."""
        self._draw_records()  # verified tokens go before the next round's drafts (a token after a draft hides it)
        start = min(self.shown, event.start)
        if event.end > start:
            self.ready += visual.draft_html(event.text, start, event.end, event.model, event.round)
            self.shown = event.end

    def _draw_records(self) -> None:
        if self.records:
            html = self.builder.add(self.records, self.text)
            self.ready += html
            self.verified += html
            self.unsent += len(self.records)
            self.shown = self.records[-1].end  # the drafts before them are hidden now
            self.records.clear()

    def drawn(self) -> str:
        """The strip's HTML of what is pending; it is on the strip from now on."""
        self._draw_records()
        html, self.ready, self.unsent = self.ready, "", 0
        return html


@config.gpu
def run_stream(prompt, method, model_names, drafter, settings_values: dict, request: gr.Request, progress=gr.Progress(),  # noqa: B008
               runtime: str | None = None):
    """Stream one run: the strip grows append-only, the other views fill in at the end.

    ``settings_values`` maps a setting's name to its control's value (``ui.controls``)."""
    session = config.session(request)
    cancel = session.cancel
    cancel.clear()
    session.shown = None  # how many tokens the browser's strip held when Stop was clicked (stop_run_at)
    # Every yield sends the whole view; Gradio diffs it against the last one, so unchanged outputs cost
    # nothing and the strip, which only ever grows, goes out as an "append" of its new tokens.
    view = RunView(strip="", status=visual.status_html("Loading models…"), legend="", stats="", token_table=None,
                   token_filter="all", rounds="", heatmap=None, weights_plot=None, round_slider=gr.update(value=0),
                   specem_view=gr.update(visible=False), weights_note="", fork_view="")

    def settings(members: list[str]):  # the drafter box names SAFE's drafter when it is one of the members
        extra = {"drafter": drafter if drafter in members else None} if verifies_drafter(method) and drafter else {}
        return settings_from_controls(settings_values, **extra)

    try:
        checked = preflight(prompt, method, model_names, settings, offer=lambda names: config.offered(names, runtime))
        yield view
        models = config.load_models(checked.names, progress)
        job = EnsembleRun.from_request(checked, models, cancel=cancel, backend=config.backend_for(models))
    except EnsembleError as exc:
        yield view._replace(strip=visual.error_html(str(exc)), status=visual.status_html(f"⚠️ {exc}"))
        return
    session.running, session.trace = job.trace, None
    running = visual.status_html(" · ".join(job.trace.warnings) or f"Running {method} on {', '.join(job.trace.models)}…")
    drafts = verifies_drafter(method) and len(job.trace.models) > 1  # SAFE shows its drafts being checked
    started = view._replace(status=running, legend=visual.legend_html(method, job.trace.models, job.trace.settings, drafts=drafts))
    yield started
    view, pending = started, Pending(visual.StripBuilder(method, job.trace.models))
    try:
        for view in stream_tokens(homed(job.events()), started, running, pending, cancel):
            yield view
    except Exception as exc:  # noqa: BLE001 - a failing model must not take the app down
        session.running, session.trace = None, job.trace  # the partial trace stays inspectable
        pending.drawn()  # what was committed before the failure goes on the strip too; no draft stays on it
        view = view._replace(strip=pending.verified)
        kind = "" if isinstance(exc, EnsembleError) else f"The run failed: {type(exc).__name__}: "
        # every view of the partial trace (its stats, table, rounds), the failure in the status line
        yield final_views(job.trace, view.strip, f"⚠️ {kind}{exc}. Other runs are not affected." if kind else f"⚠️ {exc}")
        return
    if cancel.is_set():  # Stop: the strip and the trace stay as they were at the click
        job.withdraw(visual.records_drawn(job.trace.tokens, session.shown) if session.shown is not None
                     else len(job.trace.tokens) - pending.not_sent)
        view = view._replace(strip=visual.strip_html(job.trace))
    else:  # the strip of the trace: drafts were hidden behind their decisions, any left over go (a cut stop string)
        pending.drawn()
        view = view._replace(strip=pending.verified)
    trace = job.trace
    # Keep the trace, drop the run: its adapters hold every model's KV cache.
    session.running, session.trace = None, trace
    yield final_views(trace, view.strip, done_message(trace))


def stream_tokens(events, view: RunView, running: str, pending: Pending, cancel):
    """The run's views as its events come: committed tokens about 5 times a second, SpecEM's drafts meanwhile.
    Tokens not sent yet are left in ``pending`` (the caller adds them to the final view)."""
    last = 0.0
    for event in events:
        if isinstance(event, TokenEvent):
            pending.add(event)
        elif isinstance(event, DraftEvent):  # SAFE's drafted token, shown being checked until its round is decided
            if not cancel.is_set():
                pending.add_draft(event)
        elif isinstance(event, StatusEvent):  # drafts shown before they are decided (SpecEM's vote, SAFE's first round)
            if pending.waiting:  # what came before goes out first
                view = view._replace(strip=view.strip + pending.drawn())
                last = time.perf_counter()
            view = view._replace(status=visual.status_html(event.message))
            yield view
            continue
        elif isinstance(event, RoundEvent):
            view = view._replace(status=running)
        now = time.perf_counter()
        if cancel.is_set():
            continue  # Stop was clicked: nothing more goes to the strip (the run ends at its next check)
        if pending.waiting and (now - last >= STREAM_INTERVAL or isinstance(event, RoundEvent)):
            view = view._replace(strip=view.strip + pending.drawn())
            last = now
            yield view


def done_message(trace: RunTrace) -> str:
    s = trace.stats
    done = (  # plain words first; E/T (the papers' measure) only as the detail in brackets
        f"Done: {ensembled_text(s, trace.method)}, {s.latency_s:.1f} s, {s.tokens_per_s:.2f} tokens/s; "
        f"stop: {STOP_WORDS.get(s.stop_reason, s.stop_reason)}. Click any token to see why."
    )
    if s.stop_reason == "cancelled":
        done = f"Stopped after {s.generated_tokens} tokens ({s.latency_s:.1f} s). Click any token to see why."
    if trace.warnings:
        done = " · ".join(trace.warnings) + " · " + done
    return done


@contextlib.contextmanager
def busy(request: gr.Request | None):
    """Marks the session's run, comparison or fork as streaming (so Stop knows whether anything is)."""
    session = config.session(request)
    session.busy += 1
    try:
        yield
    finally:
        session.busy -= 1


def stop_button(active: bool) -> gr.Button:
    """Stop as it should read: red and clickable while a run, fork or comparison of this session streams; grey and
    disabled otherwise (it looked the same either way)."""
    return gr.Button(interactive=active, variant="stop" if active else "secondary")


def stop_idle(request: gr.Request):
    """Stop turned off once a run ends, unless another run of this session still streams."""
    return gr.skip() if config.session(request).busy else stop_button(False)


def stop_run(request: gr.Request):
    session = config.session(request)
    if not session.busy:
        return visual.status_html("Nothing is running: Stop ends a run, a comparison or a fork while it streams.")
    session.cancel.set()
    return visual.status_html("Stopping…")


def stop_run_at(shown, request: gr.Request):
    """The Run tab's Stop: ``shown`` is how many tokens the browser's strip held at the click (counted by the
    button's ``js``, :data:`ui.tabs.STRIP_COUNT_JS`); the run keeps exactly those."""
    session = config.session(request)
    if session.busy and isinstance(shown, int | float) and 0 <= shown < 10**7:
        session.shown = int(shown)
    return stop_run(request)


def fork_selected(method, runtime, request: gr.Request, force: str | None = None):
    """Continue the shown run from the selected token with ``method`` (``ui.forking``); the run must be finished."""
    session = config.session(request)
    trace = session.trace if session.running is None else None
    selected, index = session.selected or (None, None)
    yield from fork_stream(trace, index if selected is trace else None, method, lambda names: config.offered(names, runtime),
                           lambda names: config.load_models(names), config.backend_for, session.cancel, force)
