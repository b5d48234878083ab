"""The transformers runtime: a model's forward passes over a sequence of ids, reusing the KV cache of the longest
prefix it shares.

:class:`CachedModel` (a :class:`~ensemble.members.runtime.Runtime`) knows nothing about text: it is asked for the logits at some positions of an id sequence
(``rows``) and computes only what its cache does not already hold, after cropping the cache back to the
longest prefix shared with that sequence (``DynamicCache.crop``). This is the runtime side of a member; the
text side is :class:`ensemble.tokens.response.ResponseTokens`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import torch
from transformers import DynamicCache

from ..models.runtimes import runtime_info
from ..tokens.response import common_prefix
from .runtime import ForwardStats, Runtime


class CachedModel(Runtime):
    """Forward passes of one transformers model with a KV cache that follows the ids it is asked about.

    Args:
        model: the loaded causal LM.
        device: where its inputs go.
    """

    gil_free = runtime_info("transformers").thread_safe  # as registered

    def __init__(self, model, device: str | torch.device):
        self.model = model
        self.device = torch.device(device)
        self.stats = ForwardStats()
        self.drop()

    @classmethod
    def for_loaded(cls, loaded) -> CachedModel:
        return cls(loaded.model, loaded.device)

    @property
    def cache_ids(self) -> list[int]:
        return self._ids

    def drop(self) -> None:
        """Forget the KV cache."""
        self.cache = DynamicCache()
        self._ids: list[int] = []  # exactly the ids whose keys and values are in the cache
        self._last_logits: torch.Tensor | None = None  # logits after cache_ids[-1]

    def close(self) -> None:
        self.drop()

    def crop(self, keep: int) -> None:
        if keep < len(self._ids):
            self.cache.crop(keep - len(self._ids))
            del self._ids[keep:]
            self._last_logits = None

    @torch.inference_mode()
    def rows(self, ids: Sequence[int], positions: Sequence[int]) -> torch.Tensor:
        """Logits (float32) after each of ``positions`` (absolute, sorted) of ``ids``: one row per position.

        Only what is not cached is computed, and the output layer runs only for the wanted rows (that layer
        dominates for a 262k vocabulary). Afterwards the cache holds all of ``ids``.
        """
        ids = list(ids)
        positions = list(positions)
        last = len(ids) - 1
        if positions == [last] and self._last_logits is not None and ids == self.cache_ids:
            return self._last_logits[None]
        self.check_cancel()
        start = min(common_prefix(self.cache_ids, ids), positions[0], last)
        self.crop(start)
        new = ids[start:]
        keep = [p - start for p in positions]
        if keep == list(range(len(new) - len(keep), len(new))):
            to_keep: int | torch.Tensor = len(keep)  # a tail: the model's fast path
        else:
            to_keep = torch.tensor(keep, dtype=torch.long, device=self.device)
        t0 = time.perf_counter()
        input_ids = torch.tensor([new], dtype=torch.long, device=self.device)
        out = self.model(input_ids=input_ids, past_key_values=self.cache, use_cache=True, logits_to_keep=to_keep)
        logits = out.logits[0, -len(keep) :].float()
        self._count(t0, len(new))
        self.cache_ids.extend(new)
        self._last_logits = logits[-1] if positions[-1] == last else None
        return logits

    @torch.inference_mode()
    def branch_scores(self, ctx: int, blocks: list[list[int]], targets: list[int]) -> torch.Tensor:
        """Verify-in-line (SpecEM §3.2): run every block after the cached context of ``ctx`` ids in one pass,
        each block's position ids restarting after the context and a 4-D mask keeping the blocks apart, and
        return for each block token the log-probability and the raw logit of the token in ``targets`` at its
        position: a ``[2, tokens]`` tensor. Only these numbers leave the model (a member process sends a few
        hundred bytes, not a vocabulary row per token). The cache is cropped back to the context afterwards."""
        flat = [t for block in blocks for t in block]
        positions = [ctx + i for block in blocks for i in range(len(block))]
        logits = self._branch_logits(flat, positions, inline_mask(self.model, ctx, blocks, self.device))
        index = torch.tensor(targets, dtype=torch.long, device=logits.device)[:, None]
        raw = logits.gather(1, index)[:, 0]
        logp = torch.log_softmax(logits, dim=-1).gather(1, index)[:, 0]
        return torch.stack([logp, raw])

    def _branch_logits(self, flat: list[int], positions: list[int], mask) -> torch.Tensor:
        self.check_cancel()
        t0 = time.perf_counter()
        out = self.model(
            input_ids=torch.tensor([flat], dtype=torch.long, device=self.device),
            position_ids=torch.tensor([positions], dtype=torch.long, device=self.device),
            attention_mask=mask,
            past_key_values=self.cache,
            use_cache=True,
        )
        self.cache.crop(-len(flat))
        self._count(t0, len(flat))
        return out.logits[0].float()

    def _count(self, t0: float, tokens: int) -> None:
        self.stats.count(time.perf_counter() - t0, tokens)


def inline_mask(model, ctx: int, blocks: list[list[int]], device: torch.device):
    """Additive 4-D masks for verify-in-line (a dict per layer type for models with sliding windows)."""
    dtype = next(model.parameters()).dtype
    q = sum(len(b) for b in blocks)
    allowed = torch.zeros(q, ctx + q, dtype=torch.bool)
    allowed[:, :ctx] = True
    key_pos = torch.cat([torch.arange(ctx), torch.cat([torch.arange(ctx, ctx + len(b)) for b in blocks])])
    query_pos = key_pos[ctx:]
    row = 0
    for block in blocks:
        n = len(block)
        allowed[row : row + n, ctx + row : ctx + row + n] = torch.ones(n, n, dtype=torch.bool).tril()
        row += n

    def additive(ok: torch.Tensor) -> torch.Tensor:
        out = torch.zeros(ok.shape, dtype=dtype)
        out.masked_fill_(~ok, torch.finfo(dtype).min)
        return out[None, None].to(device)

    config = model.config.get_text_config()
    layer_types = getattr(config, "layer_types", None) or []
    if "sliding_attention" not in layer_types:
        return additive(allowed)
    window = int(config.sliding_window)
    near = (query_pos[:, None] - key_pos[None, :]) < window
    return {"full_attention": additive(allowed), "sliding_attention": additive(allowed & near)}
