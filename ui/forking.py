"""The Run tab's "what if" fork: continue the shown run from the selected token another way, streaming.

The app hands in what this needs (the session's trace and cancel flag, how to load models, where members
compute), so this module holds no state of its own; :mod:`ensemble.fork` does the work, :mod:`visual.forks`
draws the comparison.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import visual
from ensemble.errors import EnsembleError
from ensemble.fork import (
    check_force,
    compare_continuations,
    fork_method,
    fork_method_for,
    fork_point,
    fork_settings,
    member_names,
    start_fork,
)
from ensemble.methods import TokenEvent
from ensemble.trace import RunTrace, unique_labels

from .views import ForkView

STREAM_INTERVAL = 0.25


def fork_stream(trace: RunTrace | None, at, method: str, load: Callable[[list[str]], list], backend_for: Callable,
                cancel, force: str | None = None) -> Iterator[ForkView]:
    """Views of a fork of ``trace`` at token ``at`` by ``method`` (with ``force``: that key put at ``at`` first,
    and ``method`` None for the run's own): the fork's text as it grows, then both continuations compared.
    ``load`` loads models by name (the app's pool, offered names only)."""
    if trace is None or at is None:
        yield ForkView(visual.error_html("Run the ensemble (or load a trace) and click a token first: the fork "
                                         "continues the answer from the selected token."))
        return
    cancel.clear()
    try:
        force = check_force(force)
        method = fork_method_for(trace, method, force)
        at, _ = fork_point(trace, int(at))
        names = member_names(trace, method)
        settings = fork_settings(trace, method, at)
        settings.validate(fork_method(trace, method)[0], unique_labels(names))
        yield ForkView(visual.status_html(f"Loading {', '.join(names)}…"))
        models = load(names)
        job = start_fork(models, trace, at, method, settings, force, cancel=cancel, backend=backend_for(models))
    except EnsembleError as exc:
        yield ForkView(visual.error_html(str(exc)))
        return
    label = visual.forks.run_label(job.trace)
    last = 0.0
    try:
        for event in job.events():
            now = time.perf_counter()
            if isinstance(event, TokenEvent) and now - last >= STREAM_INTERVAL:
                last = now
                yield ForkView(f'<div class="el-explain"><p>Forking at token #{at}: {visual.safe(label)} is writing…</p>'
                               f'<div class="el-fork-side">{visual.kept_html(job.trace, False)}'
                               f'{visual.whitespace(job.run.text[job.trace.fork["chars"]:], False)}</div></div>')
    except Exception as exc:  # noqa: BLE001 - a failing member must not take the app down
        kind = "" if isinstance(exc, EnsembleError) else f"{type(exc).__name__}: "
        yield ForkView(visual.error_html(f"The fork failed: {kind}{exc}"))
        return
    forked = job.trace
    comparison = compare_continuations(trace, forked)
    note = " (stopped)" if forked.stats.stop_reason == "cancelled" else ""
    yield ForkView(visual.fork_html(trace, forked, comparison.to_dict()),
                   visual.status_html(f"Fork done{note}: {forked.stats.generated_tokens} tokens by {label}."))
