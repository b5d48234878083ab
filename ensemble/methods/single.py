"""Single-model decoding through the adapter: the baseline every ensemble is measured against."""

from __future__ import annotations

from collections.abc import Iterator

from ..tokens.key_table import EOS_KEY
from ..trace import Decision
from .base import Chooser, Run, model_topk


def run_single(run: Run, record_topk: int = 5) -> Iterator:
    """Greedy (or sampled) decoding of the first model; equals ``model.generate`` token for token."""
    adapter = run.adapters[0]
    chooser = Chooser(run.settings.temperature, run.settings.top_p, run.settings.seed)
    while run.budget_left > 0:
        run.check_cancel()
        dist = adapter.next_dist()
        token_id = chooser(dist)
        topk = model_topk(adapter, dist, record_topk) if record_topk else None
        if adapter.keys.key(token_id) == EOS_KEY:
            run.add("", EOS_KEY, adapter.name, Decision.DRAFTER, topk=topk)
            return "eos"
        first = len(adapter.ids)
        adapter.append(token_id)
        run.add_model_tokens(adapter, first, Decision.DRAFTER, topk=topk)
        if run.check_stop():
            return "stop_string"
        yield from run.release()
    return "budget"
