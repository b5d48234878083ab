"""Which decision changed an answer (:mod:`ensemble.evaluation.blame`): one answer's attribution, and the dataset table
and chart. Takes the attribution as its plain dict (``Blame.to_dict()``) and the table's rows
(``blame_table``); returns escaped HTML and a Plotly figure. Buttons carry ``data-open-token``, ``data-qid`` and
``data-method``: the app's click handler opens that token in the Run tab."""

from __future__ import annotations

import plotly.graph_objects as go

from .escape import safe, whitespace

KIND_NAMES = {"outvote": "consensus outvote", "sharpening": "sharpening swap", "fused": "fused replacement",
              "segment": "SpecEM segment"}

BLAME_CSS = """
.el-blame { font-size: 11px; padding: 0 4px; margin-left: 4px; border-radius: 3px; cursor: pointer;
  border: 1px solid var(--el-line); background: var(--background-fill-secondary, Canvas); color: inherit; }
.el-blame-table td, .el-blame-table th { padding: 2px 6px; border-bottom: 1px solid var(--el-line); text-align: left; }
.el-blame-table tr.el-decisive { font-weight: 600; }
.el-open-token { margin: 4px 0; }
"""


def _key(text) -> str:
    return f'<code class="el-key">{whitespace(str(text), True, breaks=False)}</code>'


def blame_html(blame: dict, summary: str) -> str:
    """One answer's attribution: the sentence, each decision tried with its graded outcome (the decisive one in
    bold, with a button that opens it in the Run tab), and the decisions left untried."""
    rows = []
    for e in blame.get("tried", []):
        verdict = "decisive: flips the outcome" if e.get("flipped") else "not decisive"
        if e.get("error"):
            verdict = f"not run: {e['error']}"
        rows.append(f'<tr class="{"el-decisive" if e.get("flipped") else ""}"><td>#{int(e["index"])}</td>'
                    f'<td>{safe(KIND_NAMES.get(e.get("kind"), e.get("kind")))}</td><td>{_key(e.get("draft"))} → {_key(e.get("chosen"))}</td>'
                    f'<td>{safe(e.get("carried_by") or "the fused vote")}</td><td>{safe(e.get("prediction"))} '
                    f'({"right" if e.get("correct") else "wrong"})</td><td>{safe(verdict)}</td></tr>')
    untried = [int(i) for i in blame.get("untried", [])]
    more = (f'<p class="el-muted">Not tried (the fork budget, {int(blame.get("max_forks") or 0)} per answer): '
            f'{", ".join(f"#{i}" for i in untried)}.</p>') if untried else ""
    button = ""
    if blame.get("decisive") is not None:
        button = (f'<p><button type="button" class="el-open-token lg secondary" data-open-token="{int(blame["decisive"])}" '
                  f'data-qid="{int(blame["qid"])}" data-method="{safe(blame["method"])}">Open token #{int(blame["decisive"])} '
                  'in the Run tab, with the counterfactual answer beside it</button></p>')
    table = ("<table class='el-blame-table'><thead><tr><th>token</th><th>kind</th><th>drafter's key → ensemble's</th>"
             "<th>carried by</th><th>reverted, it answers</th><th>outcome</th></tr></thead><tbody>"
             + "".join(rows) + "</tbody></table>") if rows else ""
    return f'<div class="el-explain el-blame-view"><p><b>{safe(summary)}</b></p>{button}{table}{more}</div>'


def outcome_line(blame: dict) -> str:
    """The graded outcome of the decisive reversal, for the Run tab's fork view."""
    d = next((e for e in blame.get("tried", []) if e.get("index") == blame.get("decisive")), None)
    if d is None:
        return ""
    return (f'<p><b>Question {int(blame["qid"])}: {safe(blame["method"])} answered {safe(blame.get("prediction"))} '
            f'({"right" if blame.get("correct") else "wrong"}; gold {safe(blame.get("gold"))}). With token #{int(d["index"])} '
            f'reverted to the drafter\'s {_key(d.get("draft"))} and the ensemble going on, it answers {safe(d.get("prediction"))} '
            f'({"right" if d.get("correct") else "wrong"}).</b></p>')


def blame_table_html(rows: list[dict]) -> str:
    """The dataset table: per method and outcome against the reference, how many answers have a decisive decision,
    of which kind, carried by which member, at which token."""
    if not rows:
        return ('<p class="el-muted">No attribution recorded in this folder yet: run <code>python -m ensemble blame DIR '
                '--all</code> (it writes blame.jsonl), or click "find the decision" on a cell.</p>')
    body = []
    for r in rows:
        kinds = ", ".join(f"{safe(k)} {int(n)}" for k, n in r["kinds"].items()) or "–"
        members = ", ".join(f"{safe(k)} {int(n)}" for k, n in r["members"].items()) or "–"
        positions = ", ".join(str(int(p)) for p in r["positions"]) or "–"
        body.append(f'<tr><td>{safe(r["method"])}</td><td>{safe(r["outcome"])} against {safe(r["reference"])}</td>'
                    f'<td class="el-num">{int(r["searched"])} of {int(r["answers"])}</td><td class="el-num">{int(r["decisive"])}</td>'
                    f'<td class="el-num">{int(r["none"])}</td><td class="el-num">{int(r["budget"])}</td><td>{kinds}</td>'
                    f'<td>{members}</td><td>{positions}</td><td class="el-num">{int(r["forks"])} / {int(r["seconds"])} s</td></tr>')
    return ('<div class="el-table-scroll"><table class="el-results el-blame-table"><thead><tr><th>method</th><th>answers</th>'
            '<th>searched</th><th>one decisive decision</th><th>none decisive</th><th>budget spent</th><th>decisive, by kind</th>'
            '<th>carried by</th><th>at token</th><th>forks / time</th></tr></thead><tbody>' + "".join(body) + "</tbody></table></div>")


def blame_figure(rows: list[dict]):
    """Decisive decisions by kind, one bar group per method and outcome (None without any)."""
    if not rows or not any(r["decisive"] for r in rows):
        return None
    labels = [f'{r["method"]}<br>{r["outcome"]}' for r in rows]
    fig = go.Figure()
    for name in KIND_NAMES.values():
        counts = [int(r["kinds"].get(name, 0)) for r in rows]
        if any(counts):
            fig.add_bar(name=name, x=labels, y=counts)
    undecided = [int(r["searched"]) - int(r["decisive"]) for r in rows]
    fig.add_bar(name="no single decisive decision (or budget)", x=labels, y=undecided, marker_color="#bbbbbb")
    fig.update_layout(barmode="stack", height=320, margin=dict(l=40, r=10, t=30, b=40),
                      title="Which decision changed the answer (against the drafter alone)", yaxis_title="answers")
    return fig
