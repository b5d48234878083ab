"""SpecEM's verify-in-line (Lv et al., arXiv 2412.07380 §3.2): a verifier scores every candidate segment in
ONE forward pass.

The pass runs over [cached context | block 1 | block 2 | ...]; the position ids of every block restart right
after the context, and a 4-D attention mask lets each block see the context and its own earlier tokens only.
Models with sliding-window layers (Gemma 3) get one mask per layer type.
"""

from __future__ import annotations

import torch

from ..adapter import ModelAdapter


def score_inline(adapter: ModelAdapter, context: int, blocks: list[list[int]]) -> list[tuple[list[float], list[float]]]:
    """Score several continuations of the first ``context`` response tokens of ``adapter`` in one pass.

    Returns, per block, the log-probability and the raw logit of each of its tokens. The adapter keeps its
    first ``context`` response tokens; its cache is cropped back to them afterwards.
    """
    adapter.truncate_tokens(context)
    first = adapter.next_logits().float()
    first_logp = torch.log_softmax(first, dim=-1)
    flat = [t for block in blocks for t in block]
    if not flat:
        return [([], []) for _ in blocks]
    ctx = adapter.prompt_len + context
    positions, offsets = [], []
    for block in blocks:
        offsets.append(len(positions))
        positions.extend(range(ctx, ctx + len(block)))
    mask = inline_mask(adapter.model, ctx, blocks, adapter.runtime.device)
    # The row after each block token scores the block's next token (the last one's row scores nothing).
    targets = [block[i + 1] if i + 1 < len(block) else 0 for block in blocks for i in range(len(block))]
    logp, raw = adapter.runtime.branch_scores(flat, positions, mask, targets).tolist()
    results = []
    for block, off in zip(blocks, offsets, strict=True):
        if not block:
            results.append(([], []))
            continue
        lps = [float(first_logp[block[0]])] + logp[off : off + len(block) - 1]
        raws = [float(first[block[0]])] + raw[off : off + len(block) - 1]
        results.append((lps, raws))
    return results


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
