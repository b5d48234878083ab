"""The Compare tab: two to four methods run one after another on one prompt and the same models, their answers
side by side as they finish, and the explanation of a token clicked in a card."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import gradio as gr

import visual
from ensemble.errors import EnsembleError, InputError
from ensemble.members.home import homed
from ensemble.methods import EnsembleRun, TokenEvent
from ensemble.preflight import preflight
from ensemble.settings import METHODS
from ensemble.trace import RunTrace
from ui import config
from ui.controls import settings_from_controls
from ui.sessions import click_data
from ui.view_tuples import CompareView


@config.gpu
def compare_stream(prompt, methods, model_names, max_new_tokens, request: gr.Request, progress=gr.Progress(),  # noqa: B008
                   settings_values: dict | None = None, drafter=None):
    """Run 2-4 methods one after another on one prompt with the Run tab's engine settings (``settings_values``)
    and this tab's token budget; the cards, table and chart grow as each finishes, a status line says which
    runs now and how far it is."""
    def settings(members: list[str]):
        extra = {"max_new_tokens": int(max_new_tokens), "drafter": drafter if drafter in members else None}
        return settings_from_controls(settings_values or {}, **extra)

    try:
        methods = [m for m in (methods or []) if m in METHODS]
        if not 2 <= len(methods) <= 4:
            raise InputError("Pick two to four methods to compare.")
        checked = [preflight(prompt, m, model_names, settings, offer=config.offered) for m in methods]
        models = config.load_models(checked[0].names, progress)
    except (EnsembleError, ValueError, TypeError) as exc:
        yield CompareView(visual.error_html(str(exc)), cmp_status=visual.status_html(f"⚠️ {exc}"))
        return
    session = config.session(request)
    cancel = session.cancel
    cancel.clear()
    traces: dict[str, RunTrace] = {}
    session.compare = traces  # what a click on a card's token inspects
    view = CompareView(cmp_html=None)
    for i, run in enumerate(checked, start=1):
        method = run.method
        job = EnsembleRun.from_request(run, models, cancel=cancel, backend=config.backend_for(models))
        running = f"Running {method} ({i} of {len(methods)}) on {', '.join(job.trace.models)}"
        yield view._replace(cmp_status=visual.status_html(running + "…"))
        last = time.perf_counter()
        try:
            for event in homed(job.events()):
                if isinstance(event, TokenEvent) and time.perf_counter() - last > 1.0:
                    last = time.perf_counter()
                    so_far = event.record.index + 1
                    yield view._replace(cmp_status=visual.status_html(f"{running}: {so_far} tokens so far…"))
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
    traces = config.session(request).compare
    data = click_data(evt)
    trace, index = traces.get(data.get("run")), data.get("index")
    if trace is None or not isinstance(index, int) or not 0 <= index < len(trace.tokens):
        return '<p class="el-muted">Compare runs, then click a token in a card.</p>'
    return (f'<p><b>{visual.safe(visual.compare_label(trace))}</b></p>' + visual.explain(trace, index)
            + visual.tokenization_html(trace, index))
