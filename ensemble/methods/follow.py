"""Following a chosen key: every model extends its own tokens by the key's text, and the trace records it.

Used by every-token fusion at each step and by SAFE after a fused replacement. A model that has a token with
exactly the key appends it (its cache just grows); the others re-tokenize the tail of the new text. A key that
ends inside a character (a byte token) is finished by the model most sure of it, so the shared response only
ever holds whole characters.
"""

from __future__ import annotations

import torch

from ..tokens.distribution import Dist
from ..tokens.key_table import is_complete, is_control
from ..trace import Decision
from .base import Run
from .member import ModelAdapter


def follow_key(adapters: list[ModelAdapter], dists: list[Dist], text: str, key: str) -> tuple[str, ModelAdapter | None, int]:
    """Extend every model by ``key``.

    Returns the text added, and when the key ended inside a character (a byte token): the model that finished
    the character greedily (the one most sure of the key) and the index of its first new token, so the
    caller can record each of its tokens (the shared text only ever holds whole characters).
    """
    if not is_complete(key):
        scores = []
        for a, d in zip(adapters, dists, strict=True):
            ids = a.keys.ids_for_key(key)
            scores.append(float(d.probs(ids).sum()) if ids else -1.0)
        owner = adapters[max(range(len(adapters)), key=scores.__getitem__)]
        first = len(owner.ids)
        owner.append_ids(owner.key_ids(key))
        for _ in range(4):
            if owner.finished:
                break
            owner.append(owner.next_dist().argmax())
        finished = owner.finished
        if not finished:  # not valid UTF-8 after all: drop the stray bytes, keep whole characters
            owner.sync(owner.text)
        for a in adapters:
            if a is not owner:
                a.follow(owner)  # same tokenizer: the very tokens that finished the character
        new_text = owner.text
        if not finished:
            owner = None
        return new_text[len(text) :], owner, first
    for a, d in zip(adapters, dists, strict=True):
        ids = a.keys.ids_for_key(key)
        if ids and a.finished:
            best = ids[0] if len(ids) == 1 else ids[int(torch.argmax(d.logits(ids)))]
            a.append(best)
        elif not is_control(key):  # (a control token this model lacks changes nothing for it)
            a.sync(text + key)
    return ("" if is_control(key) else key), None, 0


def record_followed(run: Run, piece: str, key: str, owner: ModelAdapter | None, first: int, model: str, decision: Decision, **kwargs) -> None:
    """Record a followed key: one record, or one per token of the model that finished a split character."""
    if owner is None:
        run.add(piece, key, model, decision, **kwargs)
        return
    fusion = kwargs.pop("fusion", None)
    for i in range(first, len(owner.ids)):
        if i == first:
            run.add_model_tokens(owner, i, decision, upto=i + 1, fusion=fusion, **kwargs)
        else:
            run.add_model_tokens(owner, i, Decision.DRAFTER, upto=i + 1, condition="completes_character", round_index=kwargs.get("round_index"))
