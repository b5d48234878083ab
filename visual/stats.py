"""Run statistics, the per-token table, and the side-by-side comparison of several runs."""

from __future__ import annotations

import csv
import io

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ensemble.trace import DECISIONS, RunTrace
from ensemble.trace.readable import DECISION_WORDS, et_text

from . import records as rd
from .charts import hover_table, label, style, unique
from .escape import plain_whitespace, safe
from .numbers import number_text
from .style import DECISION_LABELS, DECISION_STYLE

TOKEN_COLUMNS = ["index", "text", "start", "end", "model", "decision", "condition", "round", "fused_choice", "draft", "sharpened", "blocked_by"]


def _ordered_decisions(counts: dict) -> list[str]:
    known = [d for d in DECISIONS if d in counts]
    return known + sorted(str(d) for d in counts if d not in DECISIONS)


def stats_frame(trace: RunTrace) -> pd.DataFrame:
    """Two columns, ``metric`` and ``value``: the run's numbers exactly as ``trace.stats`` holds them."""
    s = trace.stats
    rows: list[tuple[str, object]] = [
        ("tokens", s.generated_tokens),
        ("ensemble steps", s.ensemble_steps),
        ("E/T", s.et_ratio),
        ("latency (s)", s.latency_s),
        ("tokens/s", s.tokens_per_s),
        ("first token (s)", s.first_token_s),
        ("rounds", s.rounds),
        ("stop reason", s.stop_reason),
    ]
    decisions = rd.mapping(s.decisions)
    rows += [(f"decisions: {d}", decisions[d]) for d in _ordered_decisions(decisions)]
    rows += [(f"forward passes: {m}", n) for m, n in rd.mapping(s.forward_passes).items()]
    rows += [(f"forward tokens: {m}", n) for m, n in rd.mapping(s.forward_tokens).items()]
    rows += [(f"forward time (s): {m}", n) for m, n in rd.mapping(s.forward_s).items()]
    rows += [("draft tokens", s.draft_tokens), ("draft discarded", s.draft_discarded), ("mean fusion (ms)", s.fusion_ms_mean)]
    rows += [(f"wins: {m}", n) for m, n in rd.mapping(s.wins).items()]
    return pd.DataFrame({"metric": pd.Series([m for m, _ in rows], dtype=object), "value": pd.Series([v for _, v in rows], dtype=object)})


TEXT_COLUMNS = ("text", "fused_choice", "draft")  # model output: its whitespace is drawn (· ↵ →) in the app's table


def token_frame(trace: RunTrace, decision: str | None = None) -> pd.DataFrame:
    """One row per token (``trace.token_table()``), the same columns even for an empty trace.

    The token texts show their whitespace (a token " the" reads "·the"; the CSV export keeps the raw text).
    ``decision``: only the tokens with this decision (None or "all": every token).
    """
    rows = [r for r in trace.token_table() if decision in (None, "all") or r["decision"] == decision]
    for row in rows:
        for column in TEXT_COLUMNS:
            row[column] = plain_whitespace(row[column])
    return pd.DataFrame(rows, columns=TOKEN_COLUMNS)


def token_filter_choices() -> list[tuple[str, str]]:
    """The per-token table's decision filter: (label, decision) pairs, "all" first."""
    return [("all tokens", "all"), *((DECISION_LABELS.get(d, d), d) for d in DECISIONS)]


def _fmt(value, digits: int = 2, suffix: str = "") -> str:
    if value is not None and rd.number(value) is None:
        return safe(value)  # a text such as "n/a" is shown as it is
    return number_text(value, digits, suffix=suffix)


def _kpi(name: str, value: str, title: str = "") -> str:
    return f'<div class="el-kpi" title="{safe(title)}"><span class="el-kpi-label">{safe(name)}</span><span class="el-big">{value}</span></div>'


def stats_html(trace: RunTrace, recorded: str | None = None) -> str:
    """Key numbers, decision counts as coloured chips, and per-model work, as one HTML block.

    ``recorded``: the trace is replayed, not run now (the first view, an upload, an evaluation's answer); its timings
    are labelled as recorded, with this sentence saying when and where, so nobody reads them as this machine's."""
    s = trace.stats
    et = rd.number(s.et_ratio)
    timed = "recorded " if recorded is not None else ""
    when = "as recorded, not measured now" if recorded is not None else ""
    kpis = [
        _kpi("tokens", _fmt(s.generated_tokens, 0), "generated tokens; an answer that ended by itself counts its end-of-sequence token"),
        _kpi("ensembled (E/T)", safe(et_text(et, trace.method, s.rounds)), "E/T: ensemble steps per generated token"),
        _kpi(f"{timed}latency", _fmt(s.latency_s, 2, " s"), when),
        _kpi(f"{timed}tokens/s", _fmt(s.tokens_per_s, 2), when),
        _kpi(f"{timed}first token", _fmt(s.first_token_s, 2, " s"), when),
    ]
    if rd.number(s.rounds):
        kpis.append(_kpi("rounds", _fmt(s.rounds, 0)))
    kpis.append(_kpi("stopped by", safe(s.stop_reason or "–")))
    decisions = rd.mapping(s.decisions)
    chips = "".join(
        f'<span class="el-chip {d if d in DECISION_STYLE else ""}">{safe(DECISION_LABELS.get(d, d))}: {_fmt(decisions[d], 0)}</span>'
        for d in _ordered_decisions(decisions)
    )
    passes, tokens, wins = rd.mapping(s.forward_passes), rd.mapping(s.forward_tokens), rd.mapping(s.wins)
    seconds = rd.mapping(s.forward_s)  # absent from traces written before it was recorded
    models = list(dict.fromkeys([*trace.models, *passes, *tokens, *seconds]))
    head = (
        '<tr><th>model</th><th class="el-num">forward passes</th><th class="el-num">tokens processed</th>'
        + (f'<th class="el-num" title="seconds spent inside this model\'s forward passes">{timed}forward time</th>' if seconds else "")
        + ('<th class="el-num">rounds won</th></tr>' if wins else "</tr>")
    )
    body = "".join(
        f'<tr><td>{safe(m)}</td><td class="el-num">{_fmt(passes.get(m), 0)}</td><td class="el-num">{_fmt(tokens.get(m), 0)}</td>'
        + (f'<td class="el-num">{_fmt(seconds.get(m), 2, " s")}</td>' if seconds else "")
        + (f'<td class="el-num">{_fmt(wins.get(m, 0), 0)}</td>' if wins else "")
        + "</tr>"
        for m in models
    )
    extra = []
    if rd.number(s.draft_tokens):
        extra.append(f"draft tokens {_fmt(s.draft_tokens, 0)}, discarded {_fmt(s.draft_discarded, 0)}")
    if rd.number(s.fusion_ms_mean):
        extra.append(f"mean fusion time {_fmt(s.fusion_ms_mean, 2)} ms")
    notes = "".join(f'<p class="el-muted">⚠ {safe(w)}</p>' for w in trace.warnings)
    if trace.error:
        notes += f'<p class="el-muted">Error: {safe(trace.error)}</p>'
    note = f'<p class="el-muted el-recorded">{safe(recorded)}</p>' if recorded else ""
    return (
        f'<div class="el-stats"><div class="el-kpis">{"".join(kpis)}</div>{note}'
        + (f"<div>{chips}</div>" if chips else "")
        + f'<table class="el-table">{head}{body}</table>'
        + (f'<p class="el-muted">{"; ".join(extra)}</p>' if extra else "")
        + notes
        + "</div>"
    )


# -- comparing runs ------------------------------------------------------------------------------------------
def compare_frame(traces: dict[str, RunTrace]) -> pd.DataFrame:
    """One column per run, one row per measure: method, models, tokens, E/T, latency, tokens/s, first token, then
    the decision counts. Runs are columns because there are two to four of them and a dozen measures: the table
    then fits a phone's width (a run per row would need eleven columns)."""
    present = _ordered_decisions({d: 1 for t in traces.values() for d in rd.mapping(t.stats.decisions)})
    runs = list(traces.values())
    measures: list[tuple[str, list]] = [
        ("method", [t.method for t in runs]),
        ("models", [", ".join(map(str, t.models)) for t in runs]),
        ("tokens", [t.stats.generated_tokens for t in runs]),
        ("E/T (ensemble steps per token)", [et_text(t.stats.et_ratio, t.method, t.stats.rounds) for t in runs]),
        ("latency", [number_text(t.stats.latency_s, 1, suffix=" s") for t in runs]),
        ("tokens/s", [number_text(t.stats.tokens_per_s, 1) for t in runs]),
        ("first token", [number_text(t.stats.first_token_s, 2, suffix=" s") for t in runs]),
    ]
    measures += [(f"tokens: {DECISION_WORDS.get(d, d)}", [rd.mapping(t.stats.decisions).get(d, 0) for t in runs])
                 for d in present]
    columns = {"measure": pd.Series([m for m, _ in measures], dtype=object)}
    for i, name in enumerate(traces):
        columns[str(name)] = pd.Series([values[i] for _, values in measures], dtype=object)
    return pd.DataFrame(columns)


def compare_figure(traces: dict[str, RunTrace]) -> go.Figure | None:
    """Latency and E/T per run, two bar subplots (one trace each); None for no runs."""
    if not traces:
        return None
    names = unique([label(n, glyphs=False) for n in traces])
    fig = make_subplots(rows=1, cols=2, subplot_titles=["latency (s)", "E/T (ensemble steps per token)"], horizontal_spacing=0.15)
    for col, (metric, values) in enumerate(
        [("latency (s)", [t.stats.latency_s for t in traces.values()]), ("E/T", [t.stats.et_ratio for t in traces.values()])], start=1
    ):
        hover = [
            hover_table(
                [
                    ("run", name),
                    ("method", label(t.method, glyphs=False)),
                    ("models", label(", ".join(map(str, t.models)), 60, glyphs=False)),
                    ("tokens", safe(t.stats.generated_tokens)),
                    (metric, safe(et_text(v, t.method, t.stats.rounds) if metric == "E/T" else v)),
                ]
            )
            for name, t, v in zip(names, traces.values(), values)
        ]
        fig.add_trace(
            go.Bar(
                x=names,
                y=[rd.number(v) for v in values],
                name=metric,
                marker_color="#0072B2" if col == 1 else "#CC79A7",
                customdata=hover,
                hovertemplate="%{customdata}<extra></extra>",
            ),
            row=1,
            col=col,
        )
    fig.update_yaxes(rangemode="tozero")
    fig.update_yaxes(tickformat=".1%", row=1, col=2)  # E/T as everywhere else: a percentage with one decimal
    return style(fig, 340, "Runs compared")


def tokens_csv(trace: RunTrace) -> str:
    """The per-token table (``trace.token_table()``) as CSV text, as the Trace tab exports it."""
    rows = trace.token_table()
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(rows[0]) if rows else ["index"])
    writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()
