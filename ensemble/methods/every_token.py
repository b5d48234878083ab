"""Every-token fusion (UniTE, GaC): the baselines whose instability SAFE fixes.

At every step all models give a next-token distribution, the fused key extends the response and every
model follows: a model that has a token with exactly that key appends it (its cache just grows), the others
re-tokenize the tail of the new text. With mismatched tokenizers this hands models OOV-like prefixes (SAFE
§2), which the trace makes visible.
"""

from __future__ import annotations

from collections.abc import Iterator

from ..tokens.key_table import EOS_KEY
from ..trace import Decision
from ..trace.decisions import FusedDetails, GatedDetails
from .base import Chooser, Run, model_topk
from .follow import follow_key, record_followed
from .fusion import Fuser


def run_every_token(run: Run, fusion: str) -> Iterator:
    settings = run.settings
    adapters = run.adapters
    primary = [a.name for a in adapters].index(settings.drafter) if settings.drafter else 0
    fuser = Fuser(
        [a.name for a in adapters],
        [a.keys for a in adapters],
        fusion=fusion,
        top_k=settings.top_k,
        sharpen=settings.sharpen_for(run.method),
        lam=settings.sharpen_lambda,
        scope=settings.sharpen_scope,
        missing=settings.unite_missing,
        weights=settings.weights,
        temperature=settings.temperature,
    )
    chooser = Chooser(settings.temperature, settings.top_p, settings.seed)
    gate = settings.gac_gate if fusion == "gac" else None
    while run.budget_left > 0:
        run.check_cancel()
        dists = run.backend.map(lambda a: a.next_dist(), adapters)  # at the same time on a process backend
        boundary = len(run.text)
        lead = adapters[primary]
        lead_top = chooser.dist(dists[primary]).top_prob
        if gate is not None and lead_top >= gate:  # GaC fuses only below the gate
            token_id = chooser(dists[primary])
            key = lead.keys.key(token_id)
            decision, fused = Decision.GATED, None
            details = GatedDetails(primary=lead.name, primary_top=round(lead_top, 4), gate=gate)
            who = lead.name
            topk = model_topk(lead, dists[primary], 5)
        else:
            fused = fuser.fuse(dists, drafter=primary, boundary=boundary)
            key = fused.choice if chooser.greedy else fused.keys[chooser.sample(fused.probs)]
            decision, topk = Decision.FUSED, None
            support = {
                a.name: round(float(d.probs(a.keys.ids_for_key(key)).sum()), 4) if a.keys.ids_for_key(key) else 0.0
                for a, d in zip(adapters, dists, strict=True)
            }
            details = FusedDetails(support=support, in_vocab=[a.name for a in adapters if a.keys.ids_for_key(key)])
            who = max(support.items(), key=lambda kv: kv[1])[0]
        if key == EOS_KEY:
            run.add("", EOS_KEY, who, decision, details=details, fusion=fused.record if fused else None, topk=topk)
            return "eos"
        piece, finisher, first = follow_key(adapters, dists, run.text, key)
        if finisher is not None:
            details.completed_by = finisher.name
        # How every model now cuts the text around this step (models lacking the key were re-tokenized).
        details.splits = {a.name: a.tokens_near(boundary) for a in adapters}
        record_followed(
            run, piece, key, finisher, first, who, decision, details=details, fusion=fused.record if fused else None, topk=topk
        )
        if run.check_stop():
            return "stop_string"
        yield from run.release()
    return "budget"
