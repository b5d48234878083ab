"""SAFE: selective ensembling (Yun et al., "When to Ensemble", arXiv 2510.15346, ICLR 2026).

The round follows section 4 of ``docs/algorithms.md`` (the specification, with each rule's paper section and every
deliberate difference), numbered the same way: 1. draft, 2. verify, 3. decide each draft token (stability check ->
consensus -> GaC's gate -> fuse), 4. commit, 5. stop.

One round: the drafter proposes up to n tokens from its cache; every verifier re-tokenizes the response plus
the draft and reads its distribution at each of its token edges in a single forward pass; then each draft
token is decided at its left boundary:

1. **stability (OOV-like) check**: if some verifier has no token edge there, fusing would hand it a prefix it
   never produces (SmolLM2 drafts ``S|of|ia``, Gemma holds ``Sofia`` whole): accept the draft token;
2. **consensus**: accept when every verifier's argmax is its own next token, or when the weighted mean
   probability sum(w * P) / sum(w) (drafter's of its token, each verifier's of its own; App. H) exceeds 0.5;
3. **ensemble**: otherwise fuse (UniTE or GaC, with sharpening). With GaC, GaC's own gate comes first (§4.1,
   kept in GaC+SAFE in Table 2): when the drafter's top probability is at least ``gac_gate`` its token is
   accepted (``gated``). The same key: keep walking (``after_kept="walk-on"``, the default) or end the round as
   Alg. 1 line 10 does (``"end-round"``; docs/algorithms.md, section 4). Another key: keep the accepted prefix, append the fused
   key, discard the rest of the draft, end the round; then the drafter re-tokenizes the response around the
   new text (Alg. 1 re-tokenizes every model, the drafter included), so its next draft conditions on the
   ids a text like this really has, not on its encoding of the key alone.

Beyond the released code: any number of verifiers, KV caches cropped instead of recomputed, incremental
re-tokenization, and a per-token trace of every decision.
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Generator, Iterator
from dataclasses import dataclass

import torch

from ..tokens.distribution import Dist
from ..tokens.key_table import EOS_KEY, display_key, is_complete, is_control
from ..trace import Decision, FusionRecord, RoundRecord
from ..trace.decisions import (
    ConsensusDetails,
    Details,
    DrafterDetails,
    EnsembledKeptDetails,
    EnsembledReplacedDetails,
    GatedDetails,
    OovBlockedDetails,
)
from .base import Chooser, DraftEvent, Run, StatusEvent, model_topk
from .follow import follow_key, record_followed
from .fusion import Fuser
from .member import ModelAdapter

SPLIT_WINDOW = 12

Edges = dict[str, dict[int, tuple[int | None, Dist]]]
"""verifier -> boundary -> (its own next token there, None for its end of sequence; its distribution there)."""


def _covering_starts(starts: set[int], edges: set[int]) -> dict[int, int]:
    """For each offset in ``starts`` that is not in a model's ``edges``: the nearest edge before it, where the
    model's token that covers the offset starts (offsets before its first edge are left out)."""
    ordered = sorted(edges)
    out = {}
    for b in starts - edges:
        i = bisect.bisect_left(ordered, b)
        if i > 0:
            out[b] = ordered[i - 1]
    return out


@dataclass
class Draft:
    """One round's draft: the drafter's tokens from response offset ``base`` on, its index ``first`` on."""

    base: int
    first: int
    tokens: list[tuple[int, Dist]]  # (token id, the distribution it was chosen from)
    text: str
    eos: bool  # the last token is the drafter's end of sequence (returned by ``draft``, never appended)

    def ends_at(self, j: int) -> bool:
        return self.eos and j == len(self.tokens) - 1


@dataclass
class Ahead:
    """A draft made ahead (pipelining): its length asked, the tokens with their logits, the ids appended."""

    n: int
    tokens: list[tuple[int, Dist]]
    ids: list[int]


@dataclass
class Verdict:
    """The decision on one draft token; ``replace``: the fused key that replaces it (ends the round)."""

    decision: Decision
    details: Details
    topk: list | None = None
    condition: str | None = None
    fusion: FusionRecord | None = None
    replace: str | None = None

    def record(self) -> dict:
        """The keyword arguments that record this verdict in the trace."""
        return {"condition": self.condition, "details": self.details, "fusion": self.fusion, "topk": self.topk}


def _accepted(draft: Draft, verdicts: list[Verdict]) -> int:
    """Draft tokens the drafter keeps: all decided ones but a replaced token or the end of sequence."""
    last_is_end = verdicts[-1].replace is not None or draft.ends_at(len(verdicts) - 1)
    return len(verdicts) - (1 if last_is_end else 0)


def _key_prob(adapter: ModelAdapter, dist: Dist, token_id: int | None) -> float:
    """Probability of a token; for end of sequence, of every EOS id of the model."""
    if token_id is None:
        ids = sorted(adapter.keys.eos_ids)
        return float(dist.probs(ids).sum()) if ids else 0.0
    return dist.prob(token_id)


def run_safe(run: Run) -> Iterator:
    """SAFE rounds until an accepted end of sequence, a stop string or the token budget."""
    safe = Safe(run)
    round_index = 0
    while run.budget_left > 0:
        run.check_cancel()
        t0 = time.perf_counter()
        # 1. Draft: up to n tokens from the drafter's cache (or the draft made while the last round verified)
        carried = safe.carried()
        if carried is not None:
            yield from safe.shown(carried, round_index)
        draft = carried or (yield from safe.draft(round_index))  # each drafted token shown as it is made
        if round_index == 0 and safe.verifiers:
            yield first_draft_status(draft, safe)
        t1 = time.perf_counter()
        edges, overlap = safe.verify(draft)  # 2. Verify: one pass per verifier over response + draft
        t2 = time.perf_counter()
        verdicts = safe.decide(draft, edges)  # 3. Decide each draft token at its left boundary
        ended = safe.commit(draft, verdicts, round_index)  # 4. Commit: accepted prefix (+ fused key)
        timings = {"draft_s": t1 - t0, "verify_s": t2 - t1, "decide_s": time.perf_counter() - t2, **overlap}
        record = safe.round_record(draft, verdicts, ended, round_index, timings)
        if safe.pipelined:
            record.details.update(drafted_ahead=carried is not None, ahead_tokens=len(safe.ahead.tokens) if safe.ahead else 0)
        yield run.add_round(record)
        round_index += 1
        # 5. Stop on a stop string or an accepted end of sequence; else the next round
        if run.check_stop():
            return "stop_string"
        yield from run.release()
        if ended:
            return "eos"
    return "budget"


def first_draft_status(draft: Draft, safe: Safe) -> StatusEvent:
    """What the first round has drafted while the verifiers read their prompts and the draft: nothing is committed
    before they have (the first token waits for every model's prompt), so this is what a viewer can see meanwhile."""
    text = draft.text[:80] + ("…" if len(draft.text) > 80 else "")
    verifiers = [v.name for v in safe.verifiers]
    return StatusEvent(
        f"Round 0: {safe.drafter.name} drafted {text!r}; {', '.join(verifiers)} verifying…",
        {"round": 0, "drafter": safe.drafter.name, "draft": draft.text, "verifiers": verifiers},
    )


class Safe:
    """The phases of a SAFE round over one run: who drafts, who verifies, how they fuse."""

    def __init__(self, run: Run):
        settings = run.settings
        self.run = run
        self.drafter = run.lead
        self.verifiers = [a for a in run.adapters if a is not self.drafter]
        self.order = [self.drafter, *self.verifiers]
        self.fuser = Fuser(
            [a.name for a in self.order],
            [a.keys for a in self.order],
            fusion=settings.fusion,
            top_k=settings.top_k,
            sharpen=settings.sharpen_for(run.method),
            lam=settings.sharpen_lambda,
            scope=settings.sharpen_scope,
            missing=settings.unite_missing,
            weights=settings.safe_weights(self.drafter.name),
            temperature=settings.temperature,
        )
        self.chooser = Chooser(settings.temperature, settings.top_p, settings.seed)
        self.gate = settings.gac_gate if settings.fusion == "gac" else None
        self.end_after_kept = settings.after_kept == "end-round"
        # Draft round r+1 while round r verifies: only where members compute at the same time, and greedy (a
        # sampled draft made early would draw from the generator in another order than the sequential run).
        self.pipelined = run.backend.parallel and self.chooser.greedy and bool(self.verifiers)
        self.ahead: Ahead | None = None
        self.inside: dict[str, dict[int, int]] = {}  # per verifier, this round: a draft boundary -> its token's start
        self.whole = True  # the last round accepted its draft whole and did not end (drafting ahead pays only then)

    # -- 1. Draft ------------------------------------------------------------------------------------------
    def draft(self, round_index: int) -> Generator[DraftEvent, None, Draft]:
        """Draft the round, yielding each token as a provisional :class:`DraftEvent` as soon as it is made."""
        run, drafter = self.run, self.drafter
        base, first = len(run.text), len(drafter.ids)
        tokens = []
        for token in drafter.drafting(min(run.settings.lookahead, run.budget_left), self.chooser):
            tokens.append(token)
            yield self.provisional(base, first, tokens, round_index)
        eos = bool(tokens) and drafter.keys.key(tokens[-1][0]) == EOS_KEY
        return Draft(base, first, tokens, drafter.text[base:], eos)

    def provisional(self, base: int, first: int, tokens: list, round_index: int) -> DraftEvent:
        """The last of ``tokens`` (the round's draft so far) as a viewer shows it before it is verified: the text
        it completes (``covered``: a byte token inside a character adds nothing until the character is whole)."""
        drafter, j = self.drafter, len(tokens) - 1
        key = drafter.keys.key(tokens[-1][0])
        start = max(base, drafter.covered(first + j - 1)) if j else base
        end = start if key == EOS_KEY else max(start, drafter.covered(first + j))
        return DraftEvent(round_index, j, drafter.name, "<eos>" if key == EOS_KEY else display_key(key), start, end,
                          drafter.text[:end])

    def shown(self, draft: Draft, round_index: int) -> Iterator[DraftEvent]:
        """A draft made ahead (while the last round verified), shown token by token now that its round begins."""
        for j in range(len(draft.tokens)):
            yield self.provisional(draft.base, draft.first, draft.tokens[: j + 1], round_index)

    # -- 2. Verify -----------------------------------------------------------------------------------------
    def verify(self, draft: Draft) -> tuple[Edges, dict]:
        """Each verifier tokenizes response + draft its own way; one forward pass gives its next-token
        distribution at every boundary it shares with the drafter (only those can be decided by distributions).

        The verifiers run at once on a process backend; pipelined, the drafter meanwhile drafts the next round
        as if this draft were accepted whole (:meth:`draft_ahead`). Returns the edges and, pipelined, how long
        drafting ahead took and how long it overlapped the verification."""
        drafter = self.drafter
        for v in self.verifiers:
            v.follow(drafter)  # same tokenizer: condition on the drafter's very tokens
        starts = {drafter.token_start(draft.first + j) for j in range(len(draft.tokens))} - {None}
        # A verifier's token may start before the draft (its "Fra" over the committed " F" and the drafted "ra"):
        # its edges are read from where that token starts, so a blocked first draft token has its row too.
        lo = {v.name: v.edge_at_or_before(draft.base) for v in self.verifiers}
        own = {v.name: set(v.boundaries_from(lo[v.name])) for v in self.verifiers}
        self.inside = {v.name: _covering_starts(starts, own[v.name]) for v in self.verifiers}
        # Rows beyond the shared boundaries, from the same pass, for the inspector at blocked tokens: a verifier's
        # row at each draft boundary it has, and where its token around each one it lacks starts. A round with no
        # shared boundary used to skip a verifier's pass; it now runs it for these rows, on tokens the next round's
        # pass would evaluate anyway (the cache keeps them): measured, 73 instead of 72 smollm2 passes on two
        # 128-token GSM8K answers, the same text, latency within noise (the stop's closing note).
        rows_at = {v.name: (starts & own[v.name]) | set(self.inside[v.name].values()) for v in self.verifiers}

        def job(v: ModelAdapter):
            return v.distributions_from(lo[v.name], rows_at[v.name]), time.perf_counter()

        started = time.perf_counter()
        wait = self.run.backend.submit(job, self.verifiers)
        try:
            self.ahead = self.draft_ahead(draft)
        finally:  # a Stop while drafting ahead still waits for the verifiers' passes before the run closes them
            drafted = time.perf_counter()
            rows = wait()
        edges = {v.name: {b: (tok, row) for b, tok, row in found} for v, (found, _) in zip(self.verifiers, rows, strict=True)}
        if not self.pipelined:
            return edges, {}
        verified = max((t for _, t in rows), default=started)
        return edges, {"ahead_s": drafted - started, "overlap_s": max(0.0, min(drafted, verified) - started)}

    def draft_ahead(self, draft: Draft) -> Ahead | None:
        """Pipelining (on a process backend, greedy): the next round's draft, made from the end of this one
        while the verifiers compute. The drafter is put back at the end of this draft afterwards, so deciding
        and committing see exactly the state they see without pipelining; the next round takes the draft
        only if this one was accepted whole (:meth:`carried`), so the output is token for token the same. It drafts
        ahead only after a round that was accepted whole: measured with the embedded models, drafting ahead after
        every round threw away 165 of 499 drafter passes (SAFE-UniTE, E/T 0.25), more than the overlap saved."""
        if not self.pipelined or draft.eos or not self.whole:
            return None  # after a replaced round, the next is likely replaced too: do not spend a draft on it
        n = min(self.run.settings.lookahead, self.run.budget_left - len(draft.tokens))
        if n <= 0:
            return None
        end = len(self.drafter.ids)
        tokens = self.drafter.draft(n, self.chooser)
        ids = self.drafter.ids[end:]
        self.drafter.truncate_tokens(end)  # its cache keeps the drafted tokens for when they are taken
        return Ahead(n, tokens, ids)

    def carried(self) -> Draft | None:
        """The draft made ahead, when the last round accepted its draft whole and this round's draft would have
        the same length; else None (a fresh draft is made)."""
        ahead, self.ahead = self.ahead, None
        run, drafter = self.run, self.drafter
        if ahead is None or not self.whole or ahead.n != min(run.settings.lookahead, run.budget_left):
            return None
        base, first = len(run.text), len(drafter.ids)
        drafter.append_ids(ahead.ids)
        eos = bool(ahead.tokens) and drafter.keys.key(ahead.tokens[-1][0]) == EOS_KEY
        return Draft(base, first, ahead.tokens, drafter.text[base:], eos)

    # -- 3. Decide -----------------------------------------------------------------------------------------
    def decide(self, draft: Draft, edges: Edges) -> list[Verdict]:
        """Walk the draft; stop after a replacement, the end of sequence, or (``after_kept="end-round"``) a fused
        token that keeps the draft."""
        verdicts = []
        for j in range(len(draft.tokens)):
            verdict = self.decide_token(draft, j, edges)
            verdicts.append(verdict)
            if verdict.replace is not None or draft.ends_at(j):
                break
            if verdict.decision == Decision.ENSEMBLED_KEPT and self.end_after_kept:
                break  # Alg. 1 line 10 (i <- j+1): the round ends after any ensembled token; the rest is discarded
        return verdicts

    def decide_token(self, draft: Draft, j: int, edges: Edges) -> Verdict:
        drafter = self.drafter
        token_id, dist = draft.tokens[j]
        key = drafter.keys.key(token_id)
        chosen = self.chooser.dist(dist)  # what the drafter drew from: P(d_j), its top-k
        topk = model_topk(drafter, chosen, k=5)
        end = draft.ends_at(j)
        boundary = len(drafter.text) if end else drafter.token_start(draft.first + j)
        if is_control(key) and not end:
            verdict = Verdict(Decision.DRAFTER, DrafterDetails(control_token=True))
        elif not self.verifiers:
            verdict = Verdict(Decision.DRAFTER, DrafterDetails())
        else:
            # 3a. Stability (OOV-like) check: every verifier needs a token edge at the boundary.
            blocked = [v for v in self.verifiers if boundary is None or boundary not in v.boundaries_from(boundary)]
            if blocked:
                condition = "inside_character" if boundary is None else "misaligned"
                details = OovBlockedDetails(blocked_by=[v.name for v in blocked], boundary=boundary,
                                            **self.tops_when_blocked(boundary, edges, topk))
                verdict = Verdict(Decision.OOV_BLOCKED, details, condition=condition)
            else:
                verdict = self.check(token_id, key, dist, chosen, boundary, edges, end)
            # How every model cuts the text around this point (what the inspector shows).
            at = boundary if boundary is not None else drafter.covered(draft.first + j)
            verdict.details.splits = {a.name: a.tokens_near(at) for a in self.order}
        verdict.topk = topk
        return verdict

    def tops_when_blocked(self, boundary: int | None, edges: Edges, drafter_top: list) -> dict:
        """What each model wanted where the stability check blocked fusion, for the inspector (no decision reads
        it): the drafter's top-k at the boundary; a verifier with an edge there, its top-k there; a blocked one,
        its top-k where its own token around the boundary starts (``verifier_from``), the token it would write
        instead of the drafter's cut (``verifier_tokens``). These rows come from the verification pass already
        made, so they cost output rows, not passes (but see :meth:`verify`). Empty inside a character (no verifier
        row means anything)."""
        if boundary is None:
            return {}
        tops = {self.drafter.name: drafter_top}
        start, tokens = {}, {}
        for v in self.verifiers:
            at = boundary if boundary in edges[v.name] else self.inside.get(v.name, {}).get(boundary)
            if at is None or at not in edges[v.name]:
                continue
            next_id, row = edges[v.name][at]
            tops[v.name] = model_topk(v, row, k=5)
            start[v.name] = at
            tokens[v.name] = "<eos>" if next_id is None else display_key(v.keys.key(next_id))
        if len(tops) == 1:
            return {}
        return {"per_model_top": tops, "verifier_from": start, "verifier_tokens": tokens}

    def check(self, token_id, key, dist: Dist, chosen: Dist, boundary, edges: Edges, end: bool) -> Verdict:
        """3b. consensus, 3c. GaC's gate (off: ``gate`` None), 3d. fusion, at a boundary every verifier shares.
        The consensus mean is weighted by the models' fusion weights (App. H), which the fuser holds
        normalised in the order drafter, verifiers."""
        drafter, verifiers = self.drafter, self.verifiers
        p_draft = chosen.prob(token_id)
        own, verifier_top = {}, {}
        unanimous = True
        for v in verifiers:
            next_id, row = edges[v.name][boundary]
            if end:
                next_id = None  # the verifier's own continuation at the end of the text is its EOS
            own[v.name] = (next_id, _key_prob(v, row, next_id))
            verifier_top[v.name] = model_topk(v, row, k=5)
            top = row.argmax()
            unanimous &= (top in v.keys.eos_ids) if next_id is None else (top == next_id)
        weights = self.fuser.weights
        mean_p = weights[0] * p_draft + sum(w * own[v.name][1] for w, v in zip(weights[1:], verifiers, strict=True))
        checked = {
            "boundary": boundary,
            "per_model_top": {drafter.name: model_topk(drafter, chosen, k=5), **verifier_top},
            "mean_prob": round(mean_p, 4),
            "probs": {drafter.name: round(p_draft, 4), **{n: round(p, 4) for n, (_, p) in own.items()}},
            "verifier_tokens": {
                v.name: "<eos>" if own[v.name][0] is None else display_key(v.keys.key(own[v.name][0])) for v in verifiers
            },
        }
        if self.chooser.greedy and unanimous:
            return Verdict(Decision.CONSENSUS, ConsensusDetails(**checked), condition="unanimous")
        if mean_p > 0.5:
            return Verdict(Decision.CONSENSUS, ConsensusDetails(**checked), condition="confident")
        top = chosen.top_prob
        if self.gate is not None and top >= self.gate:
            details = GatedDetails(**checked, primary=drafter.name, primary_top=round(top, 4), gate=self.gate)
            return Verdict(Decision.GATED, details)
        rows = [dist] + [edges[v.name][boundary][1] for v in verifiers]
        fused = self.fuser.fuse(rows, drafter=0, draft_key=key, boundary=boundary)
        if self.chooser.greedy:
            choice = fused.choice
        else:
            choice, checked["accept_prob"] = self.accept_or_resample(fused, key, dist, p_draft)
        checked["fused_prob"] = round(fused.prob_of(choice), 4)
        if choice == key:
            return Verdict(Decision.ENSEMBLED_KEPT, EnsembledKeptDetails(**checked), fusion=fused.record)
        details = EnsembledReplacedDetails(**checked)
        return Verdict(Decision.ENSEMBLED_REPLACED, details, fusion=fused.record, replace=choice)

    def accept_or_resample(self, fused, key: str, dist: Dist, p_draft: float) -> tuple[str, float]:
        """Paper App. H: accept the draft with probability min(1, P_ens / P_draft); on rejection sample from
        the residual max(0, P_ens - P_draft) over the fused candidates (speculative sampling). A sampled run
        reads whole rows (:meth:`~ensemble.methods.registry.Method.reads_whole_rows`)."""
        chooser, accept = self.chooser, min(1.0, fused.prob_of(key) / max(p_draft, 1e-12))
        if chooser.uniform() < accept:
            return key, round(accept, 4)
        probs = chooser.probs(dist.full())
        if self.fuser.union is not None:
            draft_on_keys = self.fuser.union.project(0, probs)
        else:
            keys = self.drafter.keys
            draft_on_keys = torch.tensor([float(probs[ids].sum()) if (ids := keys.ids_for_key(k)) else 0.0 for k in fused.keys])
        residual = (fused.probs - draft_on_keys).clamp_min(0)
        if float(residual.sum()) <= 0:
            residual = fused.probs.clone()
        return fused.keys[chooser.sample(residual / residual.sum())], round(accept, 4)

    # -- 4. Commit -----------------------------------------------------------------------------------------
    def commit(self, draft: Draft, verdicts: list[Verdict], round_index: int) -> bool:
        """Record the accepted tokens and the round's last one; True when the response ended. The only place
        that knows how a round ends: the drafter's end of sequence accepted, or a fused key in its place."""
        run, drafter = self.run, self.drafter
        last = verdicts[-1]
        replaced = last.replace is not None
        accepted = len(verdicts) - (1 if replaced or (draft.eos and len(verdicts) == len(draft.tokens)) else 0)
        self.whole = not replaced and not draft.eos and accepted == len(draft.tokens)
        drafter.truncate_tokens(draft.first + accepted)  # the drafter keeps its own ids for accepted tokens
        for j, verdict in enumerate(verdicts[:accepted]):
            run.add_model_tokens(
                drafter, draft.first + j, verdict.decision, upto=draft.first + j + 1, round_index=round_index, **verdict.record()
            )
        if not replaced:
            if accepted < len(verdicts):  # the accepted end of sequence is a (zero-width) token too
                run.add("", EOS_KEY, drafter.name, last.decision, round_index=round_index, **last.record())
                return True
            return False
        key, record = last.replace, {"round_index": round_index, **last.record()}
        if key == EOS_KEY:
            run.add("", EOS_KEY, "ensemble", Decision.ENSEMBLED_REPLACED, **record)
            return True
        if is_complete(key) and not is_control(key):
            # Alg. 1 line 5: the drafter re-tokenizes the response with the new text (a tail window, equal to a
            # full re-tokenization of that tail), so the key merges with the text before it.
            drafter.sync(run.text + key)
            run.add(key, key, "ensemble", Decision.ENSEMBLED_REPLACED, **record)
        else:
            piece, finisher, start = follow_key([drafter], [draft.tokens[accepted][1]], run.text, key)
            record_followed(run, piece, key, finisher, start, "ensemble", Decision.ENSEMBLED_REPLACED, **record)
        return False

    # -- the round's record --------------------------------------------------------------------------------
    def round_record(self, draft: Draft, verdicts: list[Verdict], ended: bool, index: int, timings: dict) -> RoundRecord:
        stats, n = self.run.trace.stats, len(draft.tokens)
        replaced = verdicts[-1].replace is not None
        accepted = _accepted(draft, verdicts)
        discarded = n - accepted - (1 if ended and not replaced else 0)
        stats.draft_tokens += n
        stats.draft_discarded += discarded
        return RoundRecord(
            index=index,
            start=draft.base,
            candidates=[{"model": self.drafter.name, "text": draft.text, "tokens": n}],
            verifiers=[v.name for v in self.verifiers],
            winner=self.drafter.name,
            accepted_text=self.run.text[draft.base :],
            timings={k: round(v, 4) for k, v in timings.items()},
            details={
                "accepted": accepted,
                "discarded": discarded,
                "replaced": replaced,
                "decisions": [str(v.decision) for v in verdicts],
            },
        )
