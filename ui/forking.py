"""The Run tab's "what if" fork: continue the shown run from the selected token another way, streaming.

The app hands in what this needs (the session's trace and cancel flag, which models it offers, how to load
them, where members compute), so this module holds no state of its own; :mod:`ensemble.fork` does the work, :mod:`visual.forks`
draws the comparison.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import visual
from ensemble.errors import EnsembleError
from ensemble.fork import compare_continuations, fork_request
from ensemble.members.home import homed
from ensemble.methods import DraftEvent, EnsembleRun, TokenEvent
from ensemble.models.runtimes import split_runtime
from ensemble.trace import RunTrace

from .view_tuples import ForkView

STREAM_INTERVAL = 0.25


def fork_stream(trace: RunTrace | None, at, method: str, offer: Callable[[list[str]], list[str]],
                load: Callable[[list[str]], list], backend_for: Callable, cancel, force: str | None = None) -> Iterator[ForkView]:
    """Views of a fork of ``trace`` at token ``at`` by ``method`` (with ``force``: that key put at ``at`` first,
    and ``method`` None for the run's own): the fork's text as it grows, then both continuations compared.
    ``offer`` checks the models' names (the ones the app offers only), ``load`` loads them (the app's pool)."""
    if trace is None or at is None:
        yield ForkView(visual.error_html("Run the ensemble (or load a trace) and click a token first: the fork "
                                         "continues the answer from the selected token."))
        return
    cancel.clear()
    try:
        request = fork_request(trace, int(at), method, force, offer=offer)
        yield ForkView(visual.status_html(f"Loading {', '.join(split_runtime(n)[0] for n in request.names)}…"))
        models = load(request.names)
        job = EnsembleRun.from_request(request, models, cancel=cancel, backend=backend_for(models))
    except EnsembleError as exc:
        yield ForkView(visual.error_html(str(exc)))
        return
    at, chars = request.fork["at"], request.fork["chars"]
    label = visual.forks.run_label(job.trace)
    kept = visual.kept_html(job.trace, False)
    last, verified = 0.0, ""
    try:
        for event in homed(job.events()):
            now = time.perf_counter()
            if isinstance(event, TokenEvent):
                verified = event.text[chars:]
            if isinstance(event, TokenEvent | DraftEvent) and now - last >= STREAM_INTERVAL:
                last = now
                # a SAFE fork's drafts shown being checked after the verified text (they are not part of it yet)
                drafted = event.text[chars + len(verified):] if isinstance(event, DraftEvent) else ""
                draft = f'<span class="el-draft">{visual.whitespace(drafted, False)}</span>' if drafted else ""
                yield ForkView(f'<div class="el-explain"><p>Forking at token #{at}: {visual.safe(label)} is writing…</p>'
                               f'<div class="el-fork-side">{kept}{visual.whitespace(verified, False)}{draft}</div></div>')
    except Exception as exc:  # noqa: BLE001 - a failing member must not take the app down
        kind = "" if isinstance(exc, EnsembleError) else f"{type(exc).__name__}: "
        yield ForkView(visual.error_html(f"The fork failed: {kind}{exc}"))
        return
    forked = job.trace
    comparison = compare_continuations(trace, forked)
    note = " (stopped)" if forked.stats.stop_reason == "cancelled" else ""
    # The fork's own line heads the fork's view; the status above the strip keeps describing the run it shows.
    done = visual.status_html(f"Fork done{note}: {forked.stats.generated_tokens} tokens by {label}.")
    yield ForkView(done + visual.fork_html(trace, forked, comparison.to_dict()))
