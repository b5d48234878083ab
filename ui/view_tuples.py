"""What each handler shows, by name: one NamedTuple per set of outputs.

A handler fills the fields by name (never by position); :func:`updates` turns a view into the
``{component: value}`` dict Gradio takes, pairing each field with the tab's component of the same name.
A field left at :data:`KEEP` leaves its component as it is. The tuples stay iterable in field order for
scripts and tests that unpack them."""

from __future__ import annotations

from typing import Any, NamedTuple

import gradio as gr


class _Keep:
    """The value of a field the handler leaves unchanged (it becomes ``gr.skip()``)."""

    def __repr__(self) -> str:
        return "KEEP"


KEEP: Any = _Keep()


class RunView(NamedTuple):
    """The Run tab's views of a run: while it streams, when it ends, and for an uploaded trace."""

    strip: Any = KEEP
    status: Any = KEEP
    legend: Any = KEEP
    stats: Any = KEEP
    token_table: Any = KEEP
    token_filter: Any = KEEP  # back to "all" for each new trace
    rounds: Any = KEEP
    heatmap: Any = KEEP
    weights_plot: Any = KEEP
    round_slider: Any = KEEP
    specem_view: Any = KEEP
    weights_note: Any = KEEP
    fork_view: Any = KEEP  # cleared by a new run or an uploaded trace (a fork belongs to the run it forked)


class InspectView(NamedTuple):
    """The inspector of one clicked token."""

    explanation: Any = ""
    tokenization: Any = ""
    charts_hint: Any = ""  # a line instead of a chart: nothing selected yet, or why this token has no fusion
    topk_plot: Any = None
    fusion_plot: Any = None
    record_json: Any = None
    whatif: Any = ""  # the top-k keys to fork with (visual.whatif_html)


class ForkView(NamedTuple):
    """A fork of the shown run (``ensemble.fork``): its continuation while it streams, then the comparison."""

    fork_view: Any = ""
    status: Any = KEEP


class TokenizerView(NamedTuple):
    tok_view: Any = ""
    tok_counts: Any = None


class CompareView(NamedTuple):
    cmp_view: Any = ""
    cmp_table: Any = None
    cmp_plot: Any = None
    cmp_html: Any = None  # the finished comparison as one self-contained page
    cmp_status: Any = KEEP  # which method runs now, and how far it is


class ExportView(NamedTuple):
    json_file: Any = None
    csv_file: Any = None
    html_file: Any = None  # the run as one self-contained page (visual.run_document)


class ResultsView(NamedTuple):
    results_view: Any = ""
    results_plot_a: Any = None
    results_plot_b: Any = None


def outputs(tab, view: type[NamedTuple]) -> list:
    """The tab's components a view fills, named as the view's fields."""
    return [getattr(tab, name) for name in view._fields]


def updates(tab, view: NamedTuple) -> dict:
    """``{component: value}`` for Gradio: each field of ``view`` to the tab's component of that name."""
    return {getattr(tab, name): (gr.skip() if value is KEEP else value) for name, value in view._asdict().items()}
