"""SAFE: selective ensembling (Yun et al., "When to Ensemble", arXiv 2510.15346, ICLR 2026).

One round: the drafter proposes up to n tokens from its cache; every verifier re-tokenizes the response plus
the draft and reads its distribution at each of its token edges in a single forward pass; then each draft
token is decided at its left boundary:

1. **stability (OOV-like) check**: if some verifier has no token edge there, fusing would hand it a prefix it
   never produces (SmolLM2 drafts ``S|of|ia``, Gemma holds ``Sofia`` whole): accept the draft token;
2. **consensus**: accept when every verifier's argmax is its own next token, or when the weighted mean
   probability sum(w * P) / sum(w) (drafter's of its token, each verifier's of its own; App. H) exceeds 0.5;
3. **ensemble**: otherwise fuse (UniTE or GaC, with sharpening). With GaC, GaC's own gate comes first (§4.1,
   kept in GaC+SAFE in Table 2): when the drafter's top probability is at least ``gac_gate`` its token is
   accepted (``gated``). The same key: keep walking. Another key: keep the accepted prefix, append the fused
   key, discard the rest of the draft, end the round; then the drafter re-tokenizes the response around the
   new text (Alg. 1 re-tokenizes every model, the drafter included), so its next draft conditions on the
   ids a text like this really has, not on its encoding of the key alone.

Beyond the released code: any number of verifiers, KV caches cropped instead of recomputed, incremental
re-tokenization, and a per-token trace of every decision.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import torch

from ..adapter import ModelAdapter
from ..decisions import (
    ConsensusDetails,
    DrafterDetails,
    EnsembledKeptDetails,
    EnsembledReplacedDetails,
    GatedDetails,
    OovBlockedDetails,
)
from ..fusion import Fuser
from ..keys import EOS_KEY, display_key, is_complete, is_control
from ..trace import Decision, RoundRecord
from .base import Chooser, Run, model_topk
from .follow import follow_key, record_followed

SPLIT_WINDOW = 12


def _key_prob(adapter: ModelAdapter, probs: torch.Tensor, token_id: int | None) -> float:
    """Probability of a token; for end of sequence, of every EOS id of the model."""
    if token_id is None:
        ids = sorted(adapter.keys.eos_ids)
        return float(probs[ids].sum()) if ids else 0.0
    return float(probs[token_id])


def run_safe(run: Run) -> Iterator:
    settings = run.settings
    names = [a.name for a in run.adapters]
    drafter = run.adapters[names.index(settings.drafter) if settings.drafter else 0]
    verifiers = [a for a in run.adapters if a is not drafter]
    order = [drafter, *verifiers]
    fuser = Fuser(
        [a.name for a in order],
        [a.keys for a in order],
        fusion=settings.fusion,
        top_k=settings.top_k,
        sharpen=settings.sharpen_for("safe"),
        lam=settings.sharpen_lambda,
        weights=settings.weights,
        temperature=settings.temperature,
    )
    chooser = Chooser(settings.temperature, settings.top_p, settings.seed)
    gate = settings.gac_gate if settings.fusion == "gac" else None
    stats = run.trace.stats
    round_index = 0
    while run.budget_left > 0:
        run.check_cancel()
        t0 = time.perf_counter()
        base, first = len(run.text), len(drafter.ids)
        draft = drafter.draft(min(settings.lookahead, run.budget_left), chooser)
        draft_text = drafter.text[base:]
        t1 = time.perf_counter()
        # Verify: each verifier tokenizes response + draft its own way; one forward pass gives its
        # next-token distribution at every one of its token edges from the round's start on.
        at_edge: dict[str, dict[int, tuple[int | None, torch.Tensor]]] = {}
        for v in verifiers:
            if v.keys.same_as(drafter.keys):
                v.restore(drafter.ids)  # same tokenizer: condition on the drafter's very tokens
            else:
                v.sync(run.text + draft_text)
        # Only boundaries that every verifier shares with the drafter can be decided by distributions.
        wanted = {drafter.token_start(first + j) for j in range(len(draft))}
        for v in verifiers:
            wanted &= set(v.boundaries_from(base))
        for v in verifiers:
            at_edge[v.name] = {b: (tok, row) for b, tok, row in v.distributions_from(base, wanted)}
        t2 = time.perf_counter()
        decisions: list[dict] = []
        replacement: tuple[int, str, object] | None = None
        ended = False
        for j, (token_id, draft_logits) in enumerate(draft):
            key = drafter.keys.key(token_id)
            draft_probs = chooser.probs(draft_logits)  # once per token: P(d_j), the drafter's top-k
            if key == EOS_KEY:
                boundary: int | None = len(drafter.text)
            else:
                boundary = drafter.token_start(first + j)
            info: dict = {"decision": Decision.DRAFTER, "details": DrafterDetails()}
            if is_control(key) and key != EOS_KEY:
                info["details"] = DrafterDetails(control_token=True)
            elif verifiers:
                blocked = [v for v in verifiers if boundary is None or boundary not in v.boundaries_from(boundary)]
                if blocked:
                    info = {
                        "decision": Decision.OOV_BLOCKED,
                        "condition": "inside_character" if boundary is None else "misaligned",
                        "details": OovBlockedDetails(blocked_by=[v.name for v in blocked], boundary=boundary),
                    }
                else:
                    info = _decide(chooser, fuser, gate, drafter, verifiers, at_edge, token_id, key, draft_logits, draft_probs, boundary)
                # How every model cuts the text around this point (what the inspector shows).
                at = boundary if boundary is not None else drafter.ends[first + j]
                info["details"].splits = {a.name: a.tokens_near(at) for a in order}
            info["topk"] = model_topk(drafter, k=5, probs=draft_probs)
            decisions.append(info)
            if info.get("replace") is not None:
                replacement = (j, info.pop("replace"), draft_logits)
                break
            if key == EOS_KEY:
                ended = True
                break
        # Commit: the drafter keeps its own ids for accepted tokens.
        accepted = replacement[0] if replacement else len(decisions) - (1 if ended else 0)
        drafter.truncate_tokens(first + accepted)
        for j, info in enumerate(decisions[:accepted]):
            run.add_model_tokens(
                drafter,
                first + j,
                info["decision"],
                upto=first + j + 1,
                condition=info.get("condition"),
                round_index=round_index,
                details=info.get("details"),
                fusion=info.get("fusion"),
                topk=info.get("topk"),
            )
        if ended and replacement is None:  # the accepted end of sequence is a (zero-width) token too
            info = decisions[-1]
            run.add("", EOS_KEY, drafter.name, info["decision"], condition=info.get("condition"), round_index=round_index,
                    details=info.get("details"), fusion=info.get("fusion"), topk=info.get("topk"))
        if replacement is not None:
            j, new_key, draft_logits = replacement
            info = decisions[j]
            if new_key == EOS_KEY:
                ended = True
                run.add("", EOS_KEY, "ensemble", Decision.ENSEMBLED_REPLACED, condition=info.get("condition"),
                        round_index=round_index, details=info["details"], fusion=info["fusion"], topk=info.get("topk"))
            elif is_complete(new_key) and not is_control(new_key):
                # Alg. 1 line 5: the drafter re-tokenizes the response with the new text (a tail window,
                # equal to a full re-tokenization of that tail), so the key merges with the text before it.
                drafter.sync(run.text + new_key)
                run.add(new_key, new_key, "ensemble", Decision.ENSEMBLED_REPLACED, condition=info.get("condition"),
                        round_index=round_index, details=info["details"], fusion=info["fusion"], topk=info.get("topk"))
            else:
                piece, finisher, start_index = follow_key([drafter], [draft_logits], run.text, new_key)
                record_followed(
                    run,
                    piece,
                    new_key,
                    finisher,
                    start_index,
                    "ensemble",
                    Decision.ENSEMBLED_REPLACED,
                    condition=info.get("condition"),
                    round_index=round_index,
                    details=info["details"],
                    fusion=info["fusion"],
                    topk=info.get("topk"),
                )
        discarded = len(draft) - accepted - (1 if ended and replacement is None else 0)
        stats.draft_tokens += len(draft)
        stats.draft_discarded += discarded
        yield run.add_round(
            RoundRecord(
                index=round_index,
                start=base,
                candidates=[{"model": drafter.name, "text": draft_text, "tokens": len(draft)}],
                verifiers=[v.name for v in verifiers],
                winner=drafter.name,
                accepted_text=run.text[base:],
                timings={
                    "draft_s": round(t1 - t0, 4),
                    "verify_s": round(t2 - t1, 4),
                    "decide_s": round(time.perf_counter() - t2, 4),
                },
                details={
                    "accepted": accepted,
                    "discarded": discarded,
                    "replaced": replacement is not None,
                    "decisions": [str(d["decision"]) for d in decisions],
                },
            )
        )
        round_index += 1
        if run.check_stop():
            return "stop_string"
        yield from run.release()
        if ended:
            return "eos"
    return "budget"


def _decide(chooser, fuser, gate, drafter, verifiers, at_edge, token_id, key, draft_logits, draft_probs, boundary) -> dict:
    """Consensus check, GaC's gate (``gate`` None: off), then fusion, for one draft token at a boundary every
    verifier shares. The consensus mean is weighted by the models' fusion weights (App. H), which the fuser
    holds normalised in the order drafter, verifiers."""
    p_draft = float(draft_probs[token_id])
    own, verifier_top = {}, {}
    unanimous = True
    for v in verifiers:
        next_id, row = at_edge[v.name][boundary]
        if key == EOS_KEY:
            next_id = None  # the verifier's own continuation at the end of the text is its EOS
        probs = torch.softmax(row.float(), dim=-1)
        own[v.name] = (next_id, _key_prob(v, probs, next_id))
        verifier_top[v.name] = model_topk(v, k=5, probs=probs)
        top = int(torch.argmax(probs))
        unanimous &= (top in v.keys.eos_ids) if next_id is None else (top == next_id)
    weights = fuser.weights
    mean_p = weights[0] * p_draft + sum(w * own[v.name][1] for w, v in zip(weights[1:], verifiers, strict=True))
    checked = {
        "boundary": boundary,
        "per_model_top": {drafter.name: model_topk(drafter, k=5, probs=draft_probs), **verifier_top},
        "mean_prob": round(mean_p, 4),
        "probs": {drafter.name: round(p_draft, 4), **{n: round(p, 4) for n, (_, p) in own.items()}},
        "verifier_tokens": {
            v.name: "<eos>" if own[v.name][0] is None else display_key(v.keys.key(own[v.name][0])) for v in verifiers
        },
    }
    if chooser.greedy and unanimous:
        return {"decision": Decision.CONSENSUS, "condition": "unanimous", "details": ConsensusDetails(**checked)}
    if mean_p > 0.5:
        return {"decision": Decision.CONSENSUS, "condition": "confident", "details": ConsensusDetails(**checked)}
    top = float(draft_probs.max())
    if gate is not None and top >= gate:
        details = GatedDetails(**checked, primary=drafter.name, primary_top=round(top, 4), gate=gate)
        return {"decision": Decision.GATED, "details": details}
    logits = [draft_logits] + [at_edge[v.name][boundary][1] for v in verifiers]
    fused = fuser.fuse(logits, drafter=0, draft_key=key, boundary=boundary)
    if chooser.greedy:
        choice = fused.choice
    else:
        # Paper App. H: accept the draft with probability min(1, P_ens / P_draft); on rejection sample from
        # the residual max(0, P_ens - P_draft) over the fused candidates (speculative sampling).
        p_ens = fused.prob_of(key)
        if chooser.uniform() < min(1.0, p_ens / max(p_draft, 1e-12)):
            choice = key
        else:
            if fuser.union is not None:
                draft_on_keys = fuser.union.project(0, draft_probs)
            else:
                draft_on_keys = torch.tensor(
                    [float(draft_probs[ids].sum()) if (ids := drafter.keys.ids_for_key(k)) else 0.0 for k in fused.keys]
                )
            residual = (fused.probs - draft_on_keys).clamp_min(0)
            if float(residual.sum()) <= 0:
                residual = fused.probs.clone()
            choice = fused.keys[chooser.sample(residual / residual.sum())]
        checked["accept_prob"] = round(min(1.0, p_ens / max(p_draft, 1e-12)), 4)
    checked["fused_prob"] = round(fused.prob_of(choice), 4)
    if choice == key:
        return {"decision": Decision.ENSEMBLED_KEPT, "details": EnsembledKeptDetails(**checked), "fusion": fused.record}
    details = EnsembledReplacedDetails(**checked)
    return {"decision": Decision.ENSEMBLED_REPLACED, "details": details, "fusion": fused.record, "replace": choice}
