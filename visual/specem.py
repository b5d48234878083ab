"""SpecEM views: a card per round (every model's candidate, scores, the winner, rewards), the verifier x
candidate score matrix of a round, and the Hedge weights over rounds."""

from __future__ import annotations

import plotly.graph_objects as go

from ensemble.capabilities import is_segments
from ensemble.trace import RoundRecord, RunTrace

from . import records as rd
from .charts import hover_table, label, prob, style, unique
from .escape import safe, whitespace
from .numbers import number_text
from .style import model_class, model_colour, swatch


def _is_specem(trace: RunTrace) -> bool:
    return is_segments(trace.method) and bool(trace.rounds)


def _num(value, digits: int = 3) -> str:
    return number_text(value, digits)


def _candidate_row(trace: RunTrace, rnd: RoundRecord, i: int, cand: dict) -> str:
    model = rd.text(cand.get("model")) or "?"
    winner = rnd.winner_index == i if rnd.winner_index is not None else model == rnd.winner
    score = rnd.aggregate[i] if i < len(rnd.aggregate) else None
    tokens = cand.get("tokens")
    tokens = int(tokens) if isinstance(tokens, int) and not isinstance(tokens, bool) else None
    eos = ' <span class="el-muted">[end of answer]</span>' if cand.get("eos") is True else ""
    text = rd.text(cand.get("text")) or ""
    return (
        f'<div class="el-cand{" winner" if winner else ""}">'
        f"<span>{swatch(model_class(trace.models, model))} {safe(model)}{' ✔' if winner else ''}</span>"
        f'<span class="el-cand-text">{whitespace(text, True) or "<i>(empty)</i>"}{eos}</span>'
        f'<span class="el-num">{"–" if tokens is None else tokens} tok</span>'
        f'<span class="el-num">score {_num(score)}</span>'
        f'<span class="el-num">reward {_num(rd.mapping(rnd.rewards).get(model))}</span>'
        "</div>"
    )


REWARD_MEANING = (
    "Hedge reward of this model: the share of (other model's verifier, other candidate) comparisons where the other "
    "verifiers scored this model's segment at least as high (its own verifier does not count; at least one "
    "comparison's share). It is not the vote: the vote adds every verifier's weighted score, so a winner can get a "
    "smaller reward than a loser the others rated highly.")
SCORE_MEANING = "The weighted score of this candidate: each verifier's score of it times that verifier's weight, summed (highest wins)."
WEIGHT_MEANING = ("The model's weight before → after this round: it multiplies the model's scores in the vote and "
                  "grows by exp(η·reward) with η = η0·sqrt(1/K)/t, then the weights are renormalised to sum to 1.")


def rounds_html(trace: RunTrace) -> str:
    """A timeline of SpecEM rounds, one collapsible card each (the last one open); "" for other methods."""
    if not _is_specem(trace):
        return ""
    cards = []
    for rnd in trace.rounds:
        timings = " · ".join(
            f"{safe(k.removesuffix('_s'))} {_num(v, 2)} s" for k, v in rd.mapping(rnd.timings).items() if rd.number(v) is not None
        )
        head = (
            f'<summary class="el-round-head"><b>Round {int(rnd.index)}</b>'
            f"<span>from character {int(rnd.start)}</span>"
            f"<span>winner {swatch(model_class(trace.models, rnd.winner or ''))} <b>{safe(rnd.winner)}</b></span>"
            + (f'<span class="el-muted">{timings}</span>' if timings else "")
            + "</summary>"
        )
        header_row = (
            '<div class="el-cand el-muted"><span>model</span><span>candidate</span><span class="el-num">tokens</span>'
            f'<span class="el-num el-help" title="{safe(SCORE_MEANING)}">weighted score ⓘ</span>'
            f'<span class="el-num el-help" title="{safe(REWARD_MEANING)}">reward ⓘ</span></div>'
        )
        cands = [_candidate_row(trace, rnd, i, c) for i, c in enumerate(rnd.candidates) if isinstance(c, dict)]
        before, after = rd.mapping(rnd.weights_before), rd.mapping(rnd.weights_after)
        weights = ", ".join(f"{safe(m)} {_num(w)} → {_num(after.get(m))}" for m, w in before.items())
        foot = (f'<div class="el-muted"><span class="el-help" title="{safe(WEIGHT_MEANING)}">weights ⓘ</span> {weights}</div>'
                if weights else "")
        is_open = " open" if rnd is trace.rounds[-1] else ""
        cards.append(f'<details class="el-round"{is_open}>{head}{header_row}{"".join(cands)}{foot}</details>')
    return f'<div class="el-rounds">{"".join(cards)}</div>'


def score_heatmap(trace: RunTrace, round_index) -> go.Figure | None:
    """Verifier x candidate scores of one round (position in ``trace.rounds``); None without a vote."""
    if not _is_specem(trace):
        return None
    try:
        rnd = trace.rounds[int(round_index)]
    except (TypeError, ValueError, IndexError):
        return None
    if int(round_index) < 0 or not rnd.scores:
        return None
    cands = [c if isinstance(c, dict) else {} for c in rnd.candidates]
    n_cols = max(len(row) for row in rnd.scores)
    z = [[rd.number(x) for x in row] + [None] * (n_cols - len(row)) for row in rnd.scores]
    verifiers = list(rnd.verifiers) + [f"verifier {i}" for i in range(len(rnd.verifiers), len(z))]
    cand_labels = unique([f"{i}: {label(cands[i].get('model'), 24, glyphs=False) if i < len(cands) else '?'}" for i in range(n_cols)])
    weights = rd.mapping(rnd.weights_before)
    hover = []
    for v, row in enumerate(z):
        line = []
        for i, value in enumerate(row):
            cand = cands[i] if i < len(cands) else {}
            line.append(
                hover_table(
                    [
                        ("verifier", label(verifiers[v], glyphs=False)),
                        ("weight", prob(weights.get(verifiers[v]))),
                        ("candidate", label(cand.get("model"), glyphs=False)),
                        ("text", label(cand.get("text"), 60)),
                        ("score", prob(value)),
                        ("weighted sum", prob(rnd.aggregate[i] if i < len(rnd.aggregate) else None)),
                    ]
                )
            )
        hover.append(line)
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=cand_labels,
            y=unique([label(v, 24, glyphs=False) for v in verifiers[: len(z)]]),
            customdata=hover,
            hovertemplate="%{customdata}<extra></extra>",
            colorscale="Viridis",
            zmin=0,
            texttemplate="%{z:.2f}",
            colorbar=dict(title=dict(text="score")),
        )
    )
    fig.update_xaxes(title_text="candidate (model)", side="bottom")
    fig.update_yaxes(title_text="verifier", autorange="reversed")
    winner = f" · winner {label(rnd.winner, glyphs=False)}" if rnd.winner else ""
    return style(fig, 120 + 46 * len(z), f"Round {int(rnd.index)}: verifier × candidate scores{winner}")


def weights_figure(trace: RunTrace) -> go.Figure | None:
    """One line per model: its Hedge weight at the start and after each round; rewards in the hover."""
    if not _is_specem(trace):
        return None
    start = rd.mapping(trace.rounds[0].weights_before)
    models = list(trace.models) + [m for m in start if m not in trace.models]
    if not start and not any(rnd.weights_after for rnd in trace.rounds):
        return None
    x = list(range(len(trace.rounds) + 1))
    fig = go.Figure()
    for i, model in enumerate(models):
        ys = [rd.number(start.get(model))] + [rd.number(rd.mapping(r.weights_after).get(model)) for r in trace.rounds]
        hover = [hover_table([("model", label(model, glyphs=False)), ("point", "start"), ("weight", prob(ys[0]))])]
        for k, rnd in enumerate(trace.rounds, start=1):
            hover.append(
                hover_table(
                    [
                        ("model", label(model, glyphs=False)),
                        ("point", f"after round {int(rnd.index)}"),
                        ("weight", prob(ys[k])),
                        ("reward", prob(rd.mapping(rnd.rewards).get(model))),
                        ("winner", label(rnd.winner, glyphs=False)),
                    ]
                )
            )
        fig.add_trace(
            go.Scatter(
                x=x,
                y=ys,
                mode="lines+markers",
                name=label(model, glyphs=False),
                line=dict(color=model_colour(i), width=2, dash=["solid", "dash", "dot", "dashdot"][i % 4]),
                customdata=hover,
                hovertemplate="%{customdata}<extra></extra>",
            )
        )
    fig.update_xaxes(title_text="round (0 = start)", tickmode="array", tickvals=x, ticktext=["start", *[str(r.index) for r in trace.rounds]])
    top = max([y for tr in fig.data for y in tr.y if y is not None] or [1.0])
    fig.update_yaxes(title_text="weight", range=[0, max(0.5, min(1.0, top * 1.15))])  # from 0: small moves look small
    fig = style(fig, 320, "Model weights over rounds (online feedback; axis from 0)")
    fig.update_layout(showlegend=True, legend=dict(orientation="h", y=-0.25))
    return fig


WEIGHTS_MEANING = (
    "A model's weight multiplies its scores when the verifiers vote. It grows when the other verifiers (not the model itself) rank "
    "that model's drafted segment above the rest (Hedge reward: the share of such comparisons it wins), by a "
    "step that shrinks every round (eta0·sqrt(1/K)/t). It follows how the models judge each other's drafts, "
    "not whether an answer is correct."
)
STILL_BELOW = 0.02
"""Weights that never move further than this from equal are called flat in :func:`weights_note`."""


def weights_note(trace: RunTrace) -> str:
    """HTML next to the weights chart: what the weights mean, who won how many segments, and, when the weights
    stayed flat, why (feedback off, one candidate per round, or rewards that did not separate the models)."""
    if not _is_specem(trace):
        return ""
    last = rd.mapping(trace.rounds[-1].weights_after)
    start = rd.mapping(trace.rounds[0].weights_before)
    wins: dict[str, int] = {}
    for rnd in trace.rounds:
        if rnd.winner:
            wins[rnd.winner] = wins.get(rnd.winner, 0) + 1
    parts = [f"<p>{safe(WEIGHTS_MEANING)}</p>"]  # plain text in HTML: no Markdown (it would show as *raw*)
    if last:
        shown = ", ".join(
            f"{safe(label(m, glyphs=False))} won {wins.get(m, 0)} of {len(trace.rounds)} segments, weight "
            f"{prob(start.get(m))} → {prob(w)}" for m, w in last.items()
        )
        parts.append(f"<p>This answer: {shown}.</p>")
    moved = max((abs((rd.number(w) or 0.0) - (rd.number(start.get(m)) or 0.0)) for m, w in last.items()), default=0.0)
    if moved < STILL_BELOW:
        eta = rd.number(rd.setting(trace, "eta"))
        rewarded = [rd.mapping(r.rewards) for r in trace.rounds if rd.mapping(r.rewards)]
        if not eta:
            why = "the online feedback is off (eta0 = 0), so the weights stay equal by design."
        elif not rewarded:
            why = "no round had two or more candidates to compare, so no model earned a reward."
        else:
            why = (
                "the rewards did not separate the models: each model's segments won about as many of the other "
                "verifiers' comparisons as the others' did, and the step shrinks every round, so the weights stay "
                "near equal. That is the algorithm's honest answer for these members, not a display fault."
            )
        parts.append(f"<p><b>Why the lines stay flat:</b> {safe(why)}</p>")
    return '<div class="el-weights-note">' + "".join(parts) + "</div>"
