"""SpecEM's verify-in-line (Lv et al., arXiv 2412.07380 §3.2): a verifier scores every candidate segment in
ONE forward pass.

The pass runs over [cached context | block 1 | block 2 | ...]; the position ids of every block restart right
after the context, and a 4-D attention mask lets each block see the context and its own earlier tokens only.
The pass itself (positions, the masks: one per layer type for models with sliding-window layers such as Gemma 3)
runs where the model is: :meth:`ensemble.members.runtime.Runtime.branch_scores`, in this process or a member's.
"""

from __future__ import annotations

from .member import ModelAdapter


def score_inline(adapter: ModelAdapter, context: int, blocks: list[list[int]]) -> list[tuple[list[float], list[float]]]:
    """Score several continuations of the first ``context`` response tokens of ``adapter`` in one pass.

    Returns, per block, the log-probability and the raw logit of each of its tokens. The adapter keeps its
    first ``context`` response tokens; its cache is cropped back to them afterwards.
    """
    adapter.truncate_tokens(context)
    first = adapter.next_dist()
    heads = sorted({block[0] for block in blocks if block})
    first_raw = dict(zip(heads, first.logits(heads).tolist(), strict=True))
    first_logp = dict(zip(heads, first.logprobs(heads).tolist(), strict=True))
    flat = [t for block in blocks for t in block]
    if not flat:
        return [([], []) for _ in blocks]
    offsets = [0]
    for block in blocks:
        offsets.append(offsets[-1] + len(block))
    # The row after each block token scores the block's next token (the last one's row scores nothing).
    targets = [block[i + 1] if i + 1 < len(block) else 0 for block in blocks for i in range(len(block))]
    logp, raw = adapter.runtime.branch_scores(adapter.prompt_len + context, blocks, targets).tolist()
    results = []
    for block, off in zip(blocks, offsets[:-1], strict=True):
        if not block:
            results.append(([], []))
            continue
        lps = [first_logp[block[0]]] + logp[off : off + len(block) - 1]
        raws = [first_raw[block[0]]] + raw[off : off + len(block) - 1]
        results.append((lps, raws))
    return results
