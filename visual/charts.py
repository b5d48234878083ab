"""Plotly figures for one token: each model's top-k, and the fused distribution before vs after sharpening.

Plotly renders a subset of HTML in labels and hover text (and LaTeX between ``$``), so every string from a
trace goes through :func:`label` or :func:`hover_table`; hover templates never contain trace text, only
``%{customdata}``.
"""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ensemble.trace import CheckedDetails, OovBlockedDetails, RunTrace, unique_labels

from . import records as rd
from .escape import safe
from .numbers import number_text

# Neutral marks: the decision colours mean decisions only (visual.style), so the bars tell "chosen" from "draft"
# by strength and pattern, and say it in a text label beside the bar.
CHOSEN = "rgba(110, 110, 110, 0.95)"
DRAFT = "rgba(110, 110, 110, 0.55)"
OTHER = "rgba(140, 140, 140, 0.3)"
DRAFT_PATTERN = "/"
GRID = "rgba(128, 128, 128, 0.25)"
LABEL = "#7f7f7f"  # a bar's value label
ABSENT = "rgba(127, 127, 127, 0.6)"  # "not in its top k": faint italic words (beside unlabelled short bars it read as 0%)
_VISIBLE = str.maketrans({" ": "·", "\t": "→", "\n": "↵", "\r": "␍"})
MAX_LABEL = 40


def label(text, limit: int = MAX_LABEL, glyphs: bool = True) -> str:
    """A trace string as a plotly label: whitespace drawn (unless ``glyphs`` is False), shortened, escaped."""
    text = "" if text is None else str(text)
    text = text.translate(_VISIBLE) if glyphs else " ".join(text.split())
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    return safe(text)


def unique(labels: list[str]) -> list[str]:
    """Plotly merges equal category labels: number repeated ones ("x", "x (2)")."""
    return unique_labels(labels, "{label} ({n})")


def hover_table(rows: list[tuple[str, str]]) -> str:
    """A monospace hover box: one ``name  value`` line per row (values already escaped by the caller).

    Names are padded with no-break spaces, which SVG text does not collapse.
    """
    width = max((len(name) for name, _ in rows), default=0)
    return "<br>".join(safe(name) + "\u00a0" * (width - len(name) + 2) + value for name, value in rows)


def prob(value) -> str:
    return number_text(value, 4)


def _top_margin(title: str | None) -> int:
    """Room for a title of one, two or three lines (titles break to fit a phone), below the app's chart label and
    above the first panel's name."""
    if not title:
        return 40
    lines = title.count("<br>") + 1
    return (60, 80, 120)[min(lines, 3) - 1] + 30 * max(0, lines - 3)


def style(fig: go.Figure, height: int, title: str | None = None) -> go.Figure:
    """Layout shared by all figures: transparent (theme-neutral) background, monospace hover boxes."""
    fig.update_layout(
        height=height,
        margin=dict(l=10, r=20, t=_top_margin(title), b=30),
        paper_bgcolor="rgba(0,0,0,0)",
        plot_bgcolor="rgba(0,0,0,0)",
        font=dict(color="#7f7f7f", size=12),
        hoverlabel=dict(font=dict(family="ui-monospace, Menlo, Consolas, monospace", size=12), align="left"),
        showlegend=False,
    )
    if title:
        fig.update_layout(title=dict(text=title, x=0.01, font=dict(size=14)))
    fig.update_xaxes(gridcolor=GRID, zerolinecolor=GRID)
    fig.update_yaxes(gridcolor=GRID, zerolinecolor=GRID)
    return fig


def _colour(key: str, chosen: str | None, draft: str | None) -> str:
    if key == chosen:
        return CHOSEN
    if key == draft:
        return DRAFT
    return OTHER


def _percent(p) -> str:
    value = rd.number(p)
    return "" if value is None else ("<1%" if 0 < value < 0.005 else f"{value:.0%}")


def _marks(key: str, chosen: str | None, draft: str | None, chosen_name: str = "chosen") -> str:
    tags = []
    if key == chosen:
        tags.append(chosen_name)
    if draft is not None and key == draft:
        tags.append("draft")
    return " + ".join(tags)


def top_lists(record) -> tuple[dict[str, list[tuple[str, float]]], str]:
    """Each model's top-k at a record and where it came from: the fusion, SAFE's ``per_model_top``, or ``topk``."""
    fusion = record.fusion
    if fusion is not None:
        per_model = {m: rd.pairs(v)[:10] for m, v in rd.mapping(fusion.per_model).items()}
        if any(per_model.values()):
            return per_model, "fusion"
    checked = record.details.per_model_top if isinstance(record.details, CheckedDetails | OovBlockedDetails) else None
    per_model = {m: rd.pairs(v)[:10] for m, v in rd.mapping(checked).items()}
    if any(per_model.values()):
        return per_model, "per_model_top"
    top = rd.pairs(record.topk)[:10]
    return ({str(record.model): top} if top else {}), "topk"


MAX_ALIGNED_KEYS = 10  # keys drawn in each model's panel (plus any chosen, draft or own next token beyond them)


def _aligned_keys(per_model: dict[str, list[tuple[str, float]]], marked: set) -> list[str]:
    """The keys every model's panel shows, in one order: the most probable in any model first, the marked ones
    (chosen, draft, a verifier's own next token) and each model's favourite always among them."""
    best: dict[str, float] = {}
    for top in per_model.values():
        for key, p in top:
            best[key] = max(best.get(key, 0.0), rd.number(p) or 0.0)
    by_best = sorted(best, key=lambda k: -best[k])
    must = {k for k in marked if k in best} | {top[0][0] for top in per_model.values()}
    shown = set(by_best[:MAX_ALIGNED_KEYS]) | must
    return [k for k in by_best if k in shown]


def topk_figure(trace: RunTrace, index) -> go.Figure | None:
    """Each model's top-k at token ``index`` as horizontal bars, one panel per model stacked in one column (a
    phone's width holds it), every panel with the same keys in the same order, so a key the models rate
    differently reads straight down. Every bar is labelled with its value; a key outside one model's top-k has no bar
    and a faint italic "not in its top k" instead. None without data.

    The bars come from the fusion's per-model top-k when the token was fused, else from SAFE's
    ``details.per_model_top`` (drafter and verifiers at the boundary), else from the record's own ``topk``
    (one model: the drafter, the single model, or GaC's primary).
    """
    record = rd.find_record(trace, index)
    if record is None:
        return None
    per_model, source = top_lists(record)
    per_model = {m: v for m, v in per_model.items() if v}
    if not per_model:
        return None
    fused: dict[str, float] = {}
    own: dict[str, str] = {}  # a SAFE verifier's own next token at the boundary: what the consensus check compares
    if source == "fusion":
        chosen, draft = record.fusion.choice, record.fusion.draft
        fused = dict(rd.pairs(record.fusion.before))
    else:
        chosen, draft = record.text, None
        tokens = record.details.verifier_tokens if isinstance(record.details, CheckedDetails | OovBlockedDetails) else None
        own = {m: k for m, k in rd.mapping(tokens).items() if isinstance(k, str)}
    n = len(per_model)
    keys = _aligned_keys(per_model, {chosen, draft, *own.values()})
    fig = make_subplots(rows=n, cols=1, shared_xaxes=True, subplot_titles=[label(m, glyphs=False) for m in per_model],
                        vertical_spacing=min(0.12, 0.3 / n))
    names = unique([label(k) for k in keys])
    for i, (model, top) in enumerate(per_model.items()):
        mine = own.get(model, chosen)
        name = "chosen" if mine == chosen else "own next token"
        probs = dict(top)
        hover, text = [], []
        absent = f"not in its top {len(top)}"
        for key in keys:
            rank = next((r for r, (k, _) in enumerate(top, start=1) if k == key), None)
            where = f"rank {rank}" if rank else absent
            rows = [("key", label(key)), ("model", f"{label(model)} ({where})"), ("p", prob(probs.get(key)))]
            if key in fused:
                rows.append(("fused p", prob(fused[key])))
            for other, other_top in per_model.items():
                if other != model:
                    rows.append((f"{other[:20]} p", prob(dict(other_top).get(key))))
            if mark := _marks(key, mine, draft, name):
                rows.append(("marked", mark))
            hover.append(hover_table(rows))
            mark = _marks(key, mine, draft, name)
            if key in probs:  # every bar says its value, so a short bar is never taken for a missing one
                text.append(" · ".join(t for t in (_percent(probs[key]), mark) if t))
            else:
                text.append(" · ".join(t for t in (absent, mark) if t))
        fig.add_trace(
            go.Bar(
                x=[probs.get(k, 0.0) for k in keys],  # no bar (0 long) where the model gave no probability: text says so
                y=names,
                orientation="h",
                name=label(model, glyphs=False),
                marker_color=[_colour(k, mine, draft) for k in keys],
                marker_pattern_shape=[DRAFT_PATTERN if draft is not None and k == draft and k != mine else "" for k in keys],
                text=text,
                textposition="outside",
                textfont=dict(color=[LABEL if k in probs else ABSENT for k in keys],
                              style=["normal" if k in probs else "italic" for k in keys]),
                cliponaxis=False,
                customdata=hover,
                hovertemplate="%{customdata}<extra></extra>",
            ),
            row=i + 1,
            col=1,
        )
    fig.update_yaxes(autorange="reversed", automargin=True)
    fig.update_xaxes(range=[0, 1.22], tickvals=[0, 0.25, 0.5, 0.75, 1], tickformat=".0%")
    if n == 1:
        title = f"Top choices of {label(next(iter(per_model)), glyphs=False)}<br>(dark: chosen)"
    elif source == "fusion":
        title = "Each model's top choices<br>(dark: chosen, hatched: the draft)"
    elif isinstance(record.details, OovBlockedDetails):
        title = "Top choices: the drafter here, a blocked verifier<br>where its own token starts<br>(dark: the draft, or its own token)"
    else:
        title = "Each model's top choices at the boundary<br>(dark: the draft or a verifier's own token)"
    return style(fig, 90 + n * (20 * len(keys) + 40), title)


def fusion_figure(trace: RunTrace, index) -> go.Figure | None:
    """The fused distribution before and after sharpening as one chart of paired bars per key (value labels on
    each bar; the key sharpening moved most is marked, and the title says when it changed the top choice);
    None when the token was not fused.

    Keys are ordered by their probability before sharpening; a key's name carries "chosen" / "draft" marks.
    """
    record = rd.find_record(trace, index)
    if record is None or record.fusion is None:
        return None
    fusion = record.fusion
    before, after = dict(rd.pairs(fusion.before)), dict(rd.pairs(fusion.after))
    if not before:
        return None
    keys = sorted(dict.fromkeys([*before, *after]), key=lambda k: -(before.get(k) or 0.0))[:12]
    per_model = {m: dict(rd.pairs(v)) for m, v in rd.mapping(fusion.per_model).items()}
    names = unique([label(k) + (f"  ({m})" if (m := _marks(k, fusion.choice, fusion.draft)) else "") for k in keys])
    fig = go.Figure()
    series = [("before sharpening" if after else "fused", before, DRAFT)] + ([(f"after {fusion.sharpen}", after, CHOSEN)] if after else [])
    for title, dist, colour in series:
        hover = []
        for key in keys:
            rows = [("key", label(key)), ("before", prob(before.get(key)))] + ([("after", prob(after.get(key)))] if after else [])
            rows += [(f"{m[:20]} p", prob(top.get(key))) for m, top in per_model.items()]
            hover.append(hover_table(rows))
        values = [dist.get(k) or 0.0 for k in keys]
        fig.add_trace(go.Bar(x=values, y=names, orientation="h", name=title, marker_color=colour,
                             text=[f"{v:.0%}" if v >= 0.005 else "<1%" for v in values], textposition="outside",
                             cliponaxis=False, customdata=hover, hovertemplate="%{customdata}<extra></extra>"))
    title = f"Fused distribution ({label(fusion.fusion, glyphs=False)})"
    if after:
        moved = max(keys, key=lambda k: abs((after.get(k) or 0.0) - (before.get(k) or 0.0)))
        change = (after.get(moved) or 0.0) - (before.get(moved) or 0.0)
        fig.add_annotation(x=max(before.get(moved) or 0.0, after.get(moved) or 0.0), y=names[keys.index(moved)],
                           text=f"sharpening: {change * 100:+.1f} pts", showarrow=True, arrowhead=2, ax=60, ay=0,
                           xanchor="left", font=dict(size=11))
        top_before, top_after = max(before, key=before.get), max(after, key=after.get)
        if top_before != top_after:
            title += f": sharpening changed<br>the top choice from {label(top_before)} to {label(top_after)}"
        else:
            title += f": before (light)<br>and after {label(fusion.sharpen or '', glyphs=False)} sharpening (dark)"
    top = max([*before.values(), *after.values()], default=1.0)
    fig.update_layout(barmode="group", bargap=0.25, showlegend=bool(after), legend=dict(orientation="h", y=-0.15))
    fig.update_yaxes(autorange="reversed", automargin=True)
    fig.update_xaxes(range=[0, min(1.0, top) * 1.45 + 0.05], tickformat=".0%")
    fig = style(fig, 120 + (34 if after else 22) * len(keys), title)
    fig.update_layout(showlegend=bool(after))
    return fig


_NO_FUSION = {
    "consensus": "The verifiers agreed with the draft (consensus), so nothing was fused here.",
    "oov_blocked": "A tokenizer mismatch blocked ensembling here: the drafter's token stood and nothing was fused.",
    "drafter": "Only the drafter decided this token: nothing was checked or fused.",
    "gated": "GaC's gate: the main model was confident enough, so its token stood and nothing was fused.",
    "segment": "SpecEM does not fuse distributions: the models' whole segments were scored and one won (the rounds below).",
}


def charts_note(trace: RunTrace, index) -> str:
    """One line where a chart would be empty: why the token at ``index`` has no fused distribution ("" when it
    has one)."""
    record = rd.find_record(trace, index)
    if record is None or record.fusion is not None:
        return ""
    if record.decision == "consensus" and record.condition == "confident":
        why = ("The verifiers were confident on average (not unanimous), so the draft stood and nothing was fused.")
    else:
        why = _NO_FUSION.get(str(record.decision), "Nothing was fused at this token.")
    return f'<p class="el-muted">{safe(why)}</p>'
