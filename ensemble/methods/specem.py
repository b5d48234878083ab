"""SpecEM: segment-level ensembling (Lv et al., arXiv 2412.07380 v3, NeurIPS 2025; first titled SpecFuse).

The round follows section 5 of ``docs/algorithms.md`` (the specification, with each rule's paper section and every
deliberate difference), numbered the same way (1. draft, 2. verify, 3. verify-in-line, 4. aggregate and commit,
5. online feedback). Each round every drafting model proposes a segment of at most L tokens from its own cache (cut back to a word
boundary); every verifier scores every candidate from the same context in ONE forward pass (verify-in-line:
candidates side by side after the cached context, position ids restarting per candidate, a 4-D mask keeping
them apart); the weighted scores pick the winner, whose text all models share next round; and an online
Hedge update moves weight toward models whose segments keep winning.

Beyond the released code: KV caches reused across rounds (it recomputes the context each round, so its cost
grows quadratically), verifiers see the real prompt, junction-correct candidate tokenization, feedback after
the round's vote for any drafter/verifier subsets, and per-phase timings in the trace.
"""

from __future__ import annotations

import math
import time
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass

import torch

from ..settings import SAMPLED_DRAFTS
from ..tokens.key_table import EOS_KEY
from ..trace import Decision, RoundRecord
from ..trace.decisions import SegmentDetails
from .base import Chooser, Run, StatusEvent
from .inline import score_inline
from .member import ModelAdapter


def _no_space_script(ch: str) -> bool:
    """Characters of scripts written without spaces (CJK ideographs, kana, hangul syllables, ...)."""
    if not ch:
        return False
    code = ord(ch)
    return (
        0x2E80 <= code <= 0x9FFF
        or 0xAC00 <= code <= 0xD7AF
        or 0xF900 <= code <= 0xFAFF
        or 0xFF00 <= code <= 0xFFEF
        or 0x20000 <= code <= 0x3FFFF
        or 0x0E00 <= code <= 0x0EFF  # Thai, Lao
    )


def _is_punct(ch: str) -> bool:
    return unicodedata.category(ch).startswith("P") if ch else False


def word_cut(text: str, edges: list[int]) -> int:
    """Where to cut a segment back to the last word boundary (SpecEM §3.1).

    A text that ends in whitespace or punctuation is kept whole. Otherwise the cut is the last of the
    drafter's token edges (``edges``) that falls before a space, after punctuation, or next to a character
    of a script written without spaces (CJK), so unfinished words are left for the next round. A text with
    no such edge (one long word) is kept whole.
    """
    if not text or text[-1].isspace() or _is_punct(text[-1]):
        return len(text)
    for cut in sorted(edges, reverse=True):
        if 0 < cut < len(text):
            before, after = text[cut - 1], text[cut]
            if after.isspace() or _is_punct(before) or _no_space_script(before) or _no_space_script(after):
                return cut
    return len(text)


def hedge_rewards(scores: list[list[float]], verifiers: list[str], candidates: list[str]) -> dict[str, float]:
    """SpecEM's reward of each candidate's model: the share of (other verifier, other candidate) pairs
    where its candidate scored at least as high, floored at one pair's share."""
    rewards = {}
    for i, model in enumerate(candidates):
        pairs = [(v, k) for v, name in enumerate(verifiers) if name != model for k in range(len(candidates)) if k != i]
        if not pairs:
            rewards[model] = 0.0
            continue
        wins = sum(1 for v, k in pairs if scores[v][i] >= scores[v][k])
        rewards[model] = max(wins, 1) / len(pairs)
    return rewards


def hedge_update(
    weights: dict[str, float], rewards: dict[str, float], eta0: float, round_number: int, k: int
) -> dict[str, float]:
    """w_m <- w_m * exp(eta_t * g_m) with eta_t = eta0 * sqrt(1/K) / t, renormalised."""
    eta = eta0 * math.sqrt(1.0 / max(k, 1)) / max(round_number, 1)
    raw = {m: w * math.exp(eta * rewards.get(m, 0.0)) for m, w in weights.items()}
    total = sum(raw.values())
    return {m: w / total for m, w in raw.items()}


def verifier_scores(token_scores: list[tuple[list[float], list[float]]], scoring: str) -> list[float]:
    """One verifier's normalised scores of all candidates from per-token log-probs and logits."""
    if scoring == "logit":
        means = [sum(raw) / len(raw) if raw else 0.0 for _, raw in token_scores]
        total = sum(means)
        return [m / total if total else 1.0 / len(means) for m in means]
    means = torch.tensor([sum(lp) / len(lp) if lp else -1e9 for lp, _ in token_scores], dtype=torch.float64)
    return torch.softmax(means, dim=0).tolist()


def _drafts_status(index: int, candidates: list[Candidate], drafters: list[str]) -> StatusEvent:
    """What the round has drafted so far: a segment is only committed after every draft and the vote, so
    this is what a viewer can see meanwhile (the first round takes every model's drafting time)."""
    done = [c.model for c in candidates]
    waiting = [n for n in drafters if n not in done]
    shown = "; ".join(f"{c.model} drafted {c.text[:80]!r}" + ("…" if len(c.text) > 80 else "") for c in candidates)
    tail = f"; {waiting[0]} drafting…" if waiting else "; verifying…"
    return StatusEvent(
        f"Round {index}: {shown}{tail}",
        {"round": index, "drafts": {c.model: c.text for c in candidates}, "waiting": waiting},
    )


@dataclass
class Candidate:
    """One drafter's segment of a round: its text, whether it ends the answer, and the drafter's ids."""

    model: str
    text: str
    eos: bool
    ids: list[int]
    first: int  # index of the segment's first token in ``ids``

    def record(self) -> dict:
        return {"model": self.model, "text": self.text, "tokens": len(self.ids) - self.first, "eos": self.eos}


class SpecEM:
    """One run's SpecEM state; a round is the phases below, numbered as in ``docs/algorithms.md``.

    ``recompute_context`` drops every cache each round, like the released code (the bench's no-cache baseline).
    """

    def __init__(self, run: Run, recompute_context: bool = False):
        settings = run.settings
        self.run, self.recompute = run, recompute_context
        self.by_name = {a.name: a for a in run.adapters}
        self.drafters = [self.by_name[n] for n in (settings.drafters or list(self.by_name))]
        self.verifiers = [self.by_name[n] for n in (settings.verifiers or list(self.by_name))]
        # One chooser per drafter, so sampled drafts do not depend on which drafter finishes first (they draft
        # at the same time on a process backend); greedy choosers hold no state.
        how = SAMPLED_DRAFTS if settings.sample_drafts else (settings.temperature, settings.top_p)
        self.choosers = {d.name: Chooser(*how, settings.seed + i) for i, d in enumerate(self.drafters)}
        self.weights = {a.name: 1.0 / len(run.adapters) for a in run.adapters}
        self.owner: ModelAdapter | None = None  # whose tokens spell the response (the last winner)
        self.committed: list[int] = []  # the owner's ids for the response, as of the start of the round

    def follow(self, adapter: ModelAdapter) -> None:
        """Bring a model to the response: the winner's very tokens when it shares its tokenizer."""
        if self.recompute:
            adapter.drop_cache()
        adapter.follow(self.owner, self.committed, self.run.text)

    # -- 1. Draft --------------------------------------------------------------------------------------------
    def draft(self, d: ModelAdapter, base: int) -> Candidate | None:
        """A segment of at most L tokens from the drafter's own cache, cut back to a word boundary (§3.1)
        unless the answer or the budget ends with it."""
        run, budget = self.run, min(self.run.settings.segment_len, self.run.budget_left)
        self.follow(d)
        first = len(d.ids)
        drafted = d.draft(budget, self.choosers[d.name])
        eos = bool(drafted) and d.keys.key(drafted[-1][0]) == EOS_KEY
        text = d.text[base:]
        if not (eos or len(drafted) < budget or len(drafted) >= run.budget_left):
            cut = word_cut(text, [end - base for _, end in d.edges_from(first)])
            if cut < len(text):
                d.truncate_tokens(next(i + 1 for i, end in d.edges_from(first) if end - base == cut))
        if len(d.ids) == first and not eos:
            return None  # nothing drafted (cannot happen with a budget left; kept for safety)
        return Candidate(d.name, d.text[base:], eos, list(d.ids), first)

    # -- 2. Verify, 3. in line -------------------------------------------------------------------------------
    def verify(self, v: ModelAdapter, candidates: list[Candidate]) -> list[float]:
        """Verifier ``v`` scores every candidate as it would follow the response, in ONE forward pass."""
        self.follow(v)
        tokenized = [v.continuation_ids(c.text) for c in candidates]
        context = min(keep for keep, _ in tokenized)
        blocks, scored_from = [], []
        for c, (keep, ids) in zip(candidates, tokenized, strict=True):
            eos_id = [min(v.keys.eos_ids)] if c.eos and v.keys.eos_ids else []
            blocks.append(v.ids[context:keep] + ids + eos_id)
            scored_from.append(keep - context)
        per_token = score_inline(v, context, blocks)
        trimmed = [(lp[s:], raw[s:]) for (lp, raw), s in zip(per_token, scored_from, strict=True)]
        return verifier_scores(trimmed, self.run.settings.scoring)

    # -- 4. Aggregate, 5. online feedback --------------------------------------------------------------------
    def aggregate(self, scores: list[list[float]], candidates: list[Candidate], round_number: int) -> tuple[list[float], dict]:
        """score_i = sum_v w_v * S[v, i] with the round's weights; then the Hedge update (after the vote)
        gives the next round's weights. Returns the aggregate scores and the rewards."""
        if not scores:
            return [1.0], {}  # a lone candidate wins without a vote
        aggregate = [
            sum(self.weights[v.name] * scores[r][i] for r, v in enumerate(self.verifiers)) for i in range(len(candidates))
        ]
        rewards = hedge_rewards(scores, [v.name for v in self.verifiers], [c.model for c in candidates])
        if self.run.settings.eta > 0 and rewards:
            self.weights = hedge_update(self.weights, rewards, self.run.settings.eta, round_number, len(candidates))
        return aggregate, rewards

    # -- 4. (continued) Commit -------------------------------------------------------------------------------
    def commit(self, winner: Candidate, index: int) -> None:
        """The winner keeps the very tokens it drafted; the others sync to them when they next draft or verify."""
        run = self.run
        owner = self.owner = self.by_name[winner.model]
        owner.restore(winner.ids)
        details = SegmentDetails(segment_of=owner.name)
        run.add_model_tokens(owner, winner.first, Decision.SEGMENT, round_index=index, details=details)
        if winner.eos:
            run.add("", EOS_KEY, owner.name, Decision.SEGMENT, round_index=index, details=details)
        run.trace.stats.wins[owner.name] = run.trace.stats.wins.get(owner.name, 0) + 1

    def play_round(self, round_number: int) -> Iterator:
        """One round; returns (via StopIteration) the reason to stop, or None to go on."""
        run, index = self.run, round_number - 1
        base, timings = len(run.text), {}
        self.committed = list(self.owner.ids) if self.owner is not None else []
        t0 = time.perf_counter()
        candidates: list[Candidate] = []
        # All drafters at once on a process backend; Stop is honoured between drafts too.
        for candidate in run.backend.map_iter(lambda d: self.draft(d, base), self.drafters, before=run.check_cancel):
            if candidate is not None:
                candidates.append(candidate)
                yield _drafts_status(index, candidates, [x.name for x in self.drafters])
        run.trace.stats.draft_tokens += sum(len(c.ids) - c.first for c in candidates)
        timings["draft_s"] = round(time.perf_counter() - t0, 4)
        if not candidates:
            return "eos"
        t1 = time.perf_counter()
        scores = []
        if len(candidates) > 1:  # every verifier at once on a process backend
            scores = list(run.backend.map_iter(lambda v: self.verify(v, candidates), self.verifiers, before=run.check_cancel))
        timings["verify_s"] = round(time.perf_counter() - t1, 4)
        weights_before = dict(self.weights)
        aggregate, rewards = self.aggregate(scores, candidates, round_number)
        win = max(range(len(candidates)), key=aggregate.__getitem__)
        run.check_cancel()  # nothing is committed once Stop was pressed
        t2 = time.perf_counter()
        self.commit(candidates[win], index)
        timings["commit_s"] = round(time.perf_counter() - t2, 4)
        stopped = run.check_stop()
        if not stopped:
            yield from run.release()  # the round's tokens stream before its record
        yield run.add_round(self.record(index, base, candidates, scores, aggregate, weights_before, rewards, win, timings))
        return "stop_string" if stopped else "eos" if candidates[win].eos else None

    def record(self, index, base, candidates, scores, aggregate, weights_before, rewards, win, timings) -> RoundRecord:
        return RoundRecord(
            index=index,
            start=base,
            candidates=[c.record() for c in candidates],
            verifiers=[v.name for v in self.verifiers],
            scores=[[round(x, 6) for x in row] for row in scores],
            aggregate=[round(x, 6) for x in aggregate],
            weights_before={k: round(w, 6) for k, w in weights_before.items()},
            weights_after={k: round(w, 6) for k, w in self.weights.items()},
            rewards={k: round(g, 6) for k, g in rewards.items()},
            winner=candidates[win].model,
            winner_index=win,
            accepted_text=candidates[win].text,
            timings=timings,
        )


def run_specem(run: Run, recompute_context: bool = False) -> Iterator:
    """SpecEM rounds until a winning EOS, a stop string or the budget."""
    specem = SpecEM(run, recompute_context)
    round_number = 0
    while run.budget_left > 0:
        run.check_cancel()
        round_number += 1
        reason = yield from specem.play_round(round_number)
        if reason is not None:
            return reason
    return "budget"
