"""Decision statistics of an evaluation as tables and charts (:func:`ensemble.evaluation.decision_stats.decision_stats`
computes them; this draws them)."""

from __future__ import annotations

import plotly.graph_objects as go

from .charts import style
from .escape import safe
from .style import DECISION_LABELS, DECISION_STYLE, model_colour


def _table(head: list[str], rows: list[list[str]], numeric: set[int] = frozenset()) -> str:
    th = "".join(f'<th class="{"el-num" if i in numeric else ""}">{safe(h)}</th>' for i, h in enumerate(head))
    body = "".join("<tr>" + "".join(f'<td class="{"el-num" if i in numeric else ""}">{c}</td>' for i, c in enumerate(r)) + "</tr>"
                   for r in rows)
    return f'<div class="el-table-scroll"><table class="el-table el-stats-table"><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table></div>'


def decisions_figure(stats: dict) -> go.Figure | None:
    """Each decision per 100 generated tokens, a stacked bar per method."""
    per = stats.get("decisions") or {}
    if not per:
        return None
    methods = list(per)
    fig = go.Figure()
    for decision, (colour, _, label, _) in DECISION_STYLE.items():
        ys = [per[m]["per_100"].get(decision, 0.0) for m in methods]
        if any(ys):
            fig.add_trace(go.Bar(x=methods, y=ys, name=label, marker_color=colour,
                                 hovertemplate=f"%{{x}}: %{{y:.1f}} {safe(label)} per 100 tokens<extra></extra>"))
    fig.update_layout(barmode="stack", showlegend=True)
    style(fig, 380, "Decisions per 100 generated tokens")
    fig.update_layout(showlegend=True, legend=dict(orientation="h", y=-0.25))
    fig.update_yaxes(title_text="per 100 tokens")
    return fig


def decisions_table(stats: dict) -> str:
    per = stats.get("decisions") or {}
    kinds = [d for d in DECISION_STYLE if any(d in e["counts"] for e in per.values())]
    rows = [[safe(m), str(e["answers"]), str(e["tokens"]), *(f'{e["per_100"].get(d, 0.0):.1f}' for d in kinds)] for m, e in per.items()]
    return _table(["method", "answers", "tokens", *(DECISION_LABELS[d] for d in kinds)], rows, set(range(1, 3 + len(kinds))))


def blocked_table(stats: dict) -> str:
    """Per (SAFE method, drafter, verifier): the share of checked draft boundaries blocked, the strings blocked
    most often (their kind and example questions)."""
    rows = []
    for e in stats.get("blocked") or []:
        top = "; ".join(f'<code>{safe(repr(t["text"]))}</code> ×{t["count"]} ({safe(t["kind"])}; q {", ".join(map(str, t["questions"]))})'
                        for t in e["top"][:5])
        kinds = ", ".join(f"{safe(k)} {n}" for k, n in sorted(e["kinds"].items(), key=lambda kv: -kv[1]))
        rows.append([safe(e["method"]), safe(e["drafter"]), safe(e["verifier"]), f'{e["blocked"]} / {e["checked"]}',
                     f'{100 * e["share"]:.1f}%', kinds or "–", top or "–"])
    if not rows:
        return '<p class="el-muted">No SAFE answers with traces: nothing was blocked.</p>'
    return _table(["method", "drafter", "verifier", "blocked / checked", "share", "kinds", "blocked most often"], rows, {3, 4})


def replacements_table(stats: dict) -> str:
    """Replacement outcomes paired with correctness, against the drafter alone."""
    rows = []
    for method, e in (stats.get("replacements") or {}).items():
        for key in sorted(e["counts"]):
            qs = e["questions"].get(key, [])
            shown = ", ".join(map(str, qs[:8])) + (" …" if len(qs) > 8 else "")
            rows.append([safe(method), safe(e["drafter"]), safe(key), str(e["counts"][key]), safe(shown)])
    if not rows:
        return '<p class="el-muted">No SAFE method with its drafter alone in this folder (add single:DRAFTER to --methods).</p>'
    return _table(["method", "drafter alone", "outcome", "questions", "which"], rows, {3})


def first_replacement_figure(stats: dict) -> go.Figure | None:
    """Per answer: the token position of its first replacement, right answers and wrong ones apart."""
    first = stats.get("first_replacement") or {}
    points = [(m, p) for m, ps in first.items() for p in ps if p["position"] is not None]
    if not points:
        return None
    fig = go.Figure()
    for correct, colour, symbol, name in ((True, "#009E73", "circle", "right"), (False, "#D55E00", "x", "wrong")):
        chosen = [(m, p) for m, p in points if p["correct"] == correct]
        fig.add_trace(go.Scatter(x=[p["position"] for _, p in chosen], y=[m for m, _ in chosen], mode="markers", name=name,
                                 marker=dict(color=colour, symbol=symbol, size=9, opacity=0.75),
                                 customdata=[[p["qid"], p["replacements"]] for _, p in chosen],
                                 hovertemplate="question %{customdata[0]}: first replacement at token %{x} "
                                               f"(%{{customdata[1]}} in all), {name}<extra></extra>"))
    style(fig, 300, "Token position of the first replacement, by correctness")
    fig.update_layout(showlegend=True, legend=dict(orientation="h", y=-0.3))
    fig.update_xaxes(title_text="token position", rangemode="tozero")
    return fig


def weights_trajectories_figure(stats: dict) -> go.Figure | None:
    """SpecEM: every question's weight trajectory in one chart, a colour per model (thin lines)."""
    segments = stats.get("segments") or {}
    if not segments:
        return None
    fig = go.Figure()
    names: list[str] = []
    shown: set[str] = set()
    for method, e in segments.items():
        for tr in e["trajectories"]:
            for name, ws in tr["weights"].items():
                if name not in names:
                    names.append(name)
                first = name not in shown
                shown.add(name)
                fig.add_trace(go.Scatter(x=list(range(len(ws))), y=ws, mode="lines", name=name, legendgroup=name, showlegend=first,
                                         line=dict(color=model_colour(names.index(name)), width=1.2), opacity=0.55,
                                         hovertemplate=f"{safe(method)}, question {tr['qid']} ({'right' if tr['correct'] else 'wrong'}): "
                                                       f"{safe(name)} %{{y:.3f}} after round %{{x}}<extra></extra>"))
    style(fig, 340, "SpecEM weights over rounds, every question")
    fig.update_layout(showlegend=True, legend=dict(orientation="h", y=-0.25))
    fig.update_xaxes(title_text="round")
    fig.update_yaxes(title_text="weight", rangemode="tozero")
    return fig


def segments_table(stats: dict) -> str:
    rows = []
    for method, e in (stats.get("segments") or {}).items():
        total = sum(e["wins"].values()) or 1
        for name, n in sorted(e["wins"].items(), key=lambda kv: -kv[1]):
            rows.append([safe(method), safe(name), str(n), f"{100 * n / total:.0f}%", str(len(e["trajectories"]))])
    if not rows:
        return ""
    return _table(["method", "model", "segments won", "share", "questions"], rows, {2, 3, 4})


def stats_html(stats: dict) -> str:
    """Every table, with a heading each (after a note when only part of the traces was read)."""
    counted = stats.get("counted") or {}
    note = []
    if counted and not counted.get("complete", True):
        note = [f'<p class="el-warning">These statistics count {int(counted.get("read", 0)):,} of the '
                f'{int(counted.get("of", 0)):,} traced answers ({int(counted.get("tokens", 0)):,} tokens): reading stopped '
                "at its time or token limit, as this folder's traces are larger than an evaluation's.</p>"]
    parts = [*note, "<h3>Decisions per 100 tokens</h3>", decisions_table(stats),
             "<h3>Blocked by the stability (OOV-like) check, per pair of models</h3>", blocked_table(stats),
             "<h3>Replacements against correctness</h3>", replacements_table(stats)]
    segments = segments_table(stats)
    if segments:
        parts += ["<h3>SpecEM segments won</h3>", segments]
    return "".join(parts)


def stats_figures(stats: dict) -> list[go.Figure]:
    return [f for f in (decisions_figure(stats), first_replacement_figure(stats), weights_trajectories_figure(stats)) if f is not None]
