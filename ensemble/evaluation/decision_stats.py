"""Decision statistics over an evaluation folder's traces, per method (plain numbers; ``visual`` charts them).

- ``decisions``: each decision per 100 generated tokens;
- ``blocked``: SAFE's stability (OOV-like) check per (drafter, verifier) pair: of the draft boundaries it
  checked, the share a verifier without a token edge blocked, and the strings blocked most often, each with its
  kind (number, name, code, other) and example questions;
- ``replacements``: a SAFE method's replaced tokens against correctness, split by whether its drafter alone
  (``single:DRAFTER`` in the same folder) was right: replaced and ended wrong, replaced and ended right, ...;
- ``first_replacement``: per answer, the token position of the first replacement and whether the answer was right;
- ``segments``: SpecEM's segments won per model and every question's weight trajectory (weights after each round).

Only answers with a trace count (``answers`` says how many per method), read within a time and token budget
(``counted`` says how many of them were read).
"""

from __future__ import annotations

import re
import time
from collections import Counter

from ..capabilities import capabilities
from ..models.runtimes import split_runtime
from ..trace.decisions import Decision, OovBlockedDetails
from .explorer import Folder

CHECKED = {Decision.CONSENSUS, Decision.OOV_BLOCKED, Decision.ENSEMBLED_KEPT, Decision.ENSEMBLED_REPLACED, Decision.GATED}
"""The decisions of a SAFE draft token whose boundary the stability check looked at."""
TOP_STRINGS, EXAMPLES = 8, 3


def string_kind(text: str) -> str:
    """What a blocked string is: ``number`` (digits), ``name`` (a capitalised word), ``code`` (symbols, ``_``,
    brackets), ``space`` or ``other``."""
    s = text.strip()
    if not s:
        return "space"
    if re.fullmatch(r"[\d.,]*\d[\d.,]*", s):
        return "number"
    if s[0].isupper() and s.isalpha():
        return "name"
    if re.search(r"[_(){}\[\]=<>;:#*/\\$^|`~]", s):
        return "code"
    return "other"


def _drafter_single(folder: Folder, drafter: str | None) -> str | None:
    for label in folder.singles():
        if drafter and split_runtime(label.split(":", 1)[1])[0] == split_runtime(drafter)[0]:
            return label
    return None


STATS_BUDGET_S = 30.0
STATS_MAX_TOKENS = 200_000
"""What :func:`decision_stats` reads at most: traces for 30 s, or 200,000 tokens of them. The project's traced
GSM8K run (240 answers, about 60,000 tokens) fits on an idle machine; twelve uploaded traces of 10,000 tokens
(70 s of reading before this bound) stop at it. Past either bound it counts what it has read and says so."""


def decision_stats(folder: Folder, budget_s: float = STATS_BUDGET_S, max_tokens: int = STATS_MAX_TOKENS) -> dict:
    """Every statistic of the module docstring, for the folder's traced answers, within a budget.

    A folder may come from anyone, and its traces may hold far more tokens than an evaluation writes: the traces
    are read question by question (every method of a question, then the next question, so a partial count covers
    every method alike) until ``budget_s`` seconds or ``max_tokens`` tokens are spent. ``counted`` says how many
    traced answers were read of how many, and ``complete`` whether that is all of them."""
    decisions: dict[str, dict] = {m: {"counts": Counter(), "tokens": 0, "answers": 0} for m in folder.methods}
    pairs: dict[tuple[str, str, str], dict] = {}
    outcomes: dict[str, dict] = {}
    first: dict[str, list[dict]] = {}
    segments: dict[str, dict] = {}
    wanted = [(q, m) for q in folder.question_ids for m in folder.methods
              if (q, m) in folder.traced and folder.row(q, m) is not None]
    deadline, read, read_tokens = time.monotonic() + budget_s, 0, 0
    for qid, method in wanted:
        if time.monotonic() > deadline or read_tokens >= max_tokens:
            break
        read += 1
        row, trace = folder.row(qid, method), folder.readable_trace(qid, method)
        if trace is None:
            continue
        read_tokens += len(trace.tokens)
        entry = decisions[method]
        entry["answers"] += 1
        entry["tokens"] += len(trace.tokens)
        entry["counts"].update(str(t.decision) for t in trace.tokens)
        correct = bool(row.get("correct"))
        caps = capabilities(trace.method)
        if caps is not None and caps.verifies_drafter:
            _count_blocked(pairs, method, trace, qid)
            replaced = [t.index for t in trace.tokens if t.decision == Decision.ENSEMBLED_REPLACED]
            first.setdefault(method, []).append({"qid": qid, "position": replaced[0] if replaced else None,
                                                 "replacements": len(replaced), "correct": correct})
            single = _drafter_single(folder, trace.drafter)
            alone = folder.row(qid, single) if single else None
            if alone is not None:
                entry = outcomes.setdefault(method, {"drafter": single, "counts": Counter(), "questions": {}})
                key = (f"drafter {'right' if alone.get('correct') else 'wrong'}, "
                       f"{'replaced' if replaced else 'no replacement'}, ensemble {'right' if correct else 'wrong'}")
                entry["counts"][key] += 1
                entry["questions"].setdefault(key, []).append(qid)
        if caps is not None and caps.segments and trace.rounds:
            _count_segments(segments.setdefault(method, {"wins": Counter(), "trajectories": []}), trace, qid, correct)
    rank = {m: i for i, m in enumerate(folder.methods)}
    return {
        "decisions": {m: {"answers": e["answers"], "tokens": e["tokens"], "counts": dict(e["counts"]),
                          "per_100": {d: round(100 * n / e["tokens"], 2) if e["tokens"] else 0.0 for d, n in e["counts"].items()}}
                      for m, e in decisions.items() if e["answers"]},
        "blocked": [_pair_entry(key, entry) for key, entry in sorted(pairs.items(), key=lambda kv: rank[kv[0][0]])],
        "replacements": {m: {"drafter": e["drafter"], "counts": dict(e["counts"]), "questions": e["questions"]}
                         for m, e in sorted(outcomes.items(), key=lambda kv: rank[kv[0]])},
        "first_replacement": dict(sorted(first.items(), key=lambda kv: rank[kv[0]])),
        "segments": {m: {"wins": dict(e["wins"]), "trajectories": e["trajectories"]}
                     for m, e in sorted(segments.items(), key=lambda kv: rank[kv[0]])},
        "counted": {"read": read, "of": len(wanted), "complete": read == len(wanted), "tokens": read_tokens},
    }


def _count_blocked(pairs: dict, method: str, trace, qid: int) -> None:
    drafter = trace.drafter or (trace.models[0] if trace.models else "?")
    verifiers = [m for m in trace.models if m != drafter]
    checked = [t for t in trace.tokens if t.decision in CHECKED]
    for v in verifiers:
        entry = pairs.setdefault((method, drafter, v), {"checked": 0, "blocked": 0, "strings": Counter(), "examples": {}})
        entry["checked"] += len(checked)
    for t in checked:
        if t.decision != Decision.OOV_BLOCKED or not isinstance(t.details, OovBlockedDetails):
            continue
        text = trace.text[t.start:t.end]
        for v in t.details.blocked_by or []:
            entry = pairs.get((method, drafter, v))
            if entry is None:
                continue
            entry["blocked"] += 1
            entry["strings"][text] += 1
            examples = entry["examples"].setdefault(text, [])
            if qid not in examples and len(examples) < EXAMPLES:
                examples.append(qid)


def _pair_entry(key: tuple[str, str, str], entry: dict) -> dict:
    method, drafter, verifier = key
    top = [{"text": s, "kind": string_kind(s), "count": n, "questions": entry["examples"].get(s, [])}
           for s, n in entry["strings"].most_common(TOP_STRINGS)]
    share = entry["blocked"] / entry["checked"] if entry["checked"] else 0.0
    return {"method": method, "drafter": drafter, "verifier": verifier, "checked": entry["checked"],
            "blocked": entry["blocked"], "share": round(share, 4), "top": top,
            "kinds": dict(Counter(string_kind(s) for s in entry["strings"].elements()))}


def _count_segments(entry: dict, trace, qid: int, correct: bool) -> None:
    rounds = [r for r in trace.rounds if r.weights_after]
    for r in rounds:
        if r.winner:
            entry["wins"][r.winner] += 1
    if rounds:
        names = list(rounds[0].weights_after)
        start = rounds[0].weights_before or {n: 1 / len(names) for n in names}
        entry["trajectories"].append({"qid": qid, "correct": correct, "weights": {
            n: [round(float(start.get(n, 0.0)), 4), *(round(float(r.weights_after.get(n, 0.0)), 4) for r in rounds)] for n in names}})
