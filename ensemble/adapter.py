"""One adapter per model in a run: its tokens and KV cache, kept in sync with the shared response text.

The adapter owns the prompt ids, the response ids, the character span each response token covers and a
transformers ``DynamicCache``. Methods change the ids (append a generated token, truncate, or re-sync to a
new response text); the cache follows lazily: the next call that needs logits crops the cache to the
longest prefix it still shares with the ids (``cache.crop(-n)``) and runs one forward pass over the rest.
"""

from __future__ import annotations

import threading
import time
from bisect import bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from transformers import DynamicCache

from .errors import Cancelled
from .keys import EOS_KEY, Spans
from .models import LoadedModel

SYNC_MARGIN = 4
"""Tokens re-tokenized before the first changed character when syncing; doubled until stable."""


@dataclass
class ForwardStats:
    passes: int = 0
    tokens: int = 0
    seconds: float = 0.0
    tokenize_seconds: float = 0.0


class ModelAdapter:
    """A loaded model's view of one run.

    Args:
        loaded: the shared model (weights, tokenizer, key table, template).
        name: the name used in traces (defaults to the model's name; two copies of one model need two names).
    """

    def __init__(self, loaded: LoadedModel, name: str | None = None):
        self.loaded = loaded
        self.name = name or loaded.name
        self.keys = loaded.keys
        self.model = loaded.model
        self.device = torch.device(loaded.device)
        self.stats = ForwardStats()
        self.cancel: threading.Event | None = None  # set by the run: checked before every forward pass
        self.prompt_ids: list[int] = []
        self._reset_response()

    # -- state ------------------------------------------------------------------------------------------
    def _reset_response(self) -> None:
        self.ids: list[int] = []
        self.ends: list[int] = []  # characters of ``text`` covered once token i is in
        self.clean: list[bool] = []  # the edge after token i is a character boundary
        self.text = ""
        self.pending = b""  # bytes of a character that the tokens so far have not finished
        self.cache = DynamicCache()
        self.cache_ids: list[int] = []  # exactly the ids whose keys and values are in the cache
        self._valid = 0  # leading cache positions that match prompt_ids + ids
        self._last_logits: torch.Tensor | None = None  # logits after cache_ids[-1]

    def start(self, prompt: str) -> None:
        """Begin a run: template the prompt and forget any response."""
        self.prompt_ids = self.loaded.prompt_ids(prompt)
        if not self.prompt_ids:  # a model must condition on something
            self.prompt_ids = self.keys.encode("\n")[:1]
        self._reset_response()

    @property
    def prompt_len(self) -> int:
        return len(self.prompt_ids)

    def all_ids(self) -> list[int]:
        return self.prompt_ids + self.ids

    def token_start(self, i: int) -> int | None:
        """Character offset where response token ``i`` starts, None if it starts inside a character."""
        if i == 0:
            return 0
        return self.ends[i - 1] if self.clean[i - 1] else None

    def spans(self) -> Spans:
        """This model's current response tokens with character spans (byte tokens share their character)."""
        n = len(self.ids)
        starts = [0] * n
        for i in range(n):
            start = self.token_start(i)
            starts[i] = starts[i - 1] if start is None else start
        ends = [len(self.text)] * n
        for i in range(n - 2, -1, -1):
            ends[i] = self.ends[i] if self.clean[i] else ends[i + 1]
        return Spans(list(self.ids), starts, ends, len(self.text))

    def tokens_near(self, offset: int, window: int = 12) -> list[list]:
        """This model's tokens within ``window`` characters of ``offset`` as [text, start, end]; byte tokens
        of one character appear once, as that character (for the inspector: how each model cuts the text)."""
        i = max(0, bisect_right(self.ends, offset - window) - 1)
        while i > 0 and self.token_start(i) is None:
            i -= 1
        out: list[list] = []
        n = len(self.ids)
        while i < n:
            start = self.token_start(i)
            j = i
            while j < n - 1 and not self.clean[j]:
                j += 1
            end = self.ends[j] if self.clean[j] else len(self.text)
            if start >= offset + window:
                break
            if end > offset - window:
                piece = self.text[start:end] if self.clean[j] else self.text[start:] + "\ufffd"
                out.append([piece, start, end])
            i = j + 1
        return out

    # -- changing the ids -------------------------------------------------------------------------------
    def _truncate(self, k: int) -> None:
        """Keep the first ``k`` response tokens."""
        if k >= len(self.ids):
            return
        del self.ids[k:], self.ends[k:], self.clean[k:]
        self._valid = min(self._valid, self.prompt_len + k)
        last_clean = k
        while last_clean > 0 and not self.clean[last_clean - 1]:
            last_clean -= 1
        self.text = self.text[: self.ends[last_clean - 1]] if last_clean else ""
        self.pending = b"".join(self.keys.text_bytes(t) for t in self.ids[last_clean:])

    def append(self, token_id: int) -> str:
        """Append one token this model chose; return the characters it completed ("" if none yet)."""
        self.ids.append(token_id)
        self._extend_valid()
        data = self.pending + self.keys.text_bytes(token_id)
        done = _complete_prefix(data)
        piece = data[:done].decode("utf-8", "replace")
        self.pending = data[done:]
        self.text += piece
        self.ends.append(len(self.text))
        self.clean.append(not self.pending)
        return piece

    def append_ids(self, token_ids: Sequence[int]) -> str:
        return "".join(self.append(t) for t in token_ids)

    def _extend_valid(self) -> None:
        """Extend the matching cache prefix when the cache already holds the appended ids (accepted drafts)."""
        full_len = self.prompt_len + len(self.ids)
        while (
            self._valid < full_len
            and self._valid < len(self.cache_ids)
            and self._valid >= self.prompt_len
            and self.cache_ids[self._valid] == self.ids[self._valid - self.prompt_len]
        ):
            self._valid += 1

    def restore(self, ids: Sequence[int]) -> None:
        """Set the response ids to ``ids`` (e.g. a winning draft saved earlier); the cache keeps what it shares."""
        same = 0
        while same < len(self.ids) and same < len(ids) and self.ids[same] == ids[same]:
            same += 1
        self._truncate(same)
        self.append_ids(ids[same:])

    def truncate_tokens(self, k: int) -> None:
        """Public form of truncation: keep ``k`` response tokens (used to roll back a rejected draft)."""
        self._truncate(k)

    def sync(self, text: str) -> None:
        """Make the response ids spell ``text``, re-tokenizing only a tail window.

        Tokens that end at least :data:`SYNC_MARGIN` tokens before the first changed character are kept;
        the window after them is re-tokenized. The window is accepted when its first token reproduces the
        old token there (so the change did not reach back across the window's start); otherwise the window
        doubles, down to a full re-tokenization. The result equals tokenizing ``text`` from scratch (tested).
        """
        if text == self.text and not self.pending:
            return
        started = time.perf_counter()
        k0, start, tail = self._retokenize(text)
        self._truncate(k0)
        self.text = text[:start]
        self.pending = b""
        for i, token_id in enumerate(tail.ids):
            self.ids.append(token_id)
            edge = tail.ends[i]
            clean = i + 1 == len(tail.ids) or tail.starts[i + 1] != tail.starts[i]
            self.ends.append(start + edge if clean else start + tail.starts[i])
            self.clean.append(clean)
        self.text = text
        self._extend_valid()
        self.stats.tokenize_seconds += time.perf_counter() - started

    def _retokenize(self, text: str) -> tuple[int, int, Spans]:
        """Tokenize ``text`` reusing this model's tokens: (tokens kept, character where the tail starts, tail)."""
        p = _common_prefix(self.text, text)
        k = bisect_right(self.ends, p)
        while k > 0 and not self.clean[k - 1]:
            k -= 1
        margin = SYNC_MARGIN
        while True:
            k0 = max(0, k - margin)
            while k0 > 0 and not self.clean[k0 - 1]:
                k0 -= 1
            start = self.ends[k0 - 1] if k0 else 0
            tail = self.keys.spans(text[start:])
            if k0 == 0 or (
                tail.ids and tail.ids[0] == self.ids[k0] and self.clean[k0] and start + tail.ends[0] == self.ends[k0]
            ):
                return k0, start, tail
            margin *= 2

    def continuation_ids(self, addition: str) -> tuple[int, list[int]]:
        """How this model tokenizes its text followed by ``addition``: the number of its current tokens that
        stay (the context) and the ids after them. The last tokens of the text may be re-merged (a junction),
        so a candidate is tokenized as it would really follow the text, not in isolation."""
        k0, _, tail = self._retokenize(self.text + addition)
        same = 0
        old = self.ids[k0:]
        while same < len(old) and same < len(tail.ids) and old[same] == tail.ids[same]:
            same += 1
        return k0 + same, list(tail.ids[same:])

    def drop_cache(self) -> None:
        """Forget the KV cache (the no-cache baseline recomputes the whole context)."""
        self.cache = DynamicCache()
        self.cache_ids = []
        self._valid = 0
        self._last_logits = None

    @torch.inference_mode()
    def score_inline(self, context: int, blocks: list[list[int]]) -> list[tuple[list[float], list[float]]]:
        """Score several continuations of the first ``context`` response tokens in ONE forward pass.

        The pass runs over [cached context | block 1 | block 2 | ...]; the position ids of every block restart
        right after the context and a 4-D attention mask lets each block see the context and its own earlier
        tokens only (SpecEM's verify-in-line). Returns, per block, the log-probability and the raw logit of each
        of its tokens. The cache is cropped back to the context afterwards.
        """
        self._truncate(context)
        first = self.next_logits().float()
        if self.cancel is not None and self.cancel.is_set():
            raise Cancelled("Stopped by the user.")
        first_logp = torch.log_softmax(first, dim=-1)
        flat = [t for block in blocks for t in block]
        if not flat:
            return [([], []) for _ in blocks]
        ctx = self.prompt_len + context
        q = len(flat)
        positions, offsets = [], []
        for block in blocks:
            offsets.append(len(positions))
            positions.extend(range(ctx, ctx + len(block)))
        mask = self._inline_mask(ctx, blocks)
        t0 = time.perf_counter()
        out = self.model(
            input_ids=torch.tensor([flat], dtype=torch.long, device=self.device),
            position_ids=torch.tensor([positions], dtype=torch.long, device=self.device),
            attention_mask=mask,
            past_key_values=self.cache,
            use_cache=True,
        )
        self.cache.crop(-q)
        self.stats.seconds += time.perf_counter() - t0
        self.stats.passes += 1
        self.stats.tokens += q
        logits = out.logits[0].float()
        logp = torch.log_softmax(logits, dim=-1)
        results = []
        for block, off in zip(blocks, offsets, strict=True):
            lps, raws = [], []
            for i, token in enumerate(block):
                if i == 0:
                    lps.append(float(first_logp[token]))
                    raws.append(float(first[token]))
                else:
                    lps.append(float(logp[off + i - 1, token]))
                    raws.append(float(logits[off + i - 1, token]))
            results.append((lps, raws))
        return results

    def _inline_mask(self, ctx: int, blocks: list[list[int]]):
        """Additive 4-D masks for verify-in-line (a dict per layer type for models with sliding windows)."""
        dtype = next(self.model.parameters()).dtype
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
            return out[None, None].to(self.device)

        config = self.model.config.get_text_config()
        layer_types = getattr(config, "layer_types", None) or []
        if "sliding_attention" not in layer_types:
            return additive(allowed)
        window = int(config.sliding_window)
        near = (query_pos[:, None] - key_pos[None, :]) < window
        return {"full_attention": additive(allowed), "sliding_attention": additive(allowed & near)}

    # -- running the model ------------------------------------------------------------------------------
    @torch.inference_mode()
    def _run(self, extra: Sequence[int] = (), rows: int = 1, positions: Sequence[int] | None = None) -> torch.Tensor:
        """Logits (float32) at the last ``rows`` positions of prompt + ids + extra, or at ``positions``
        (absolute, sorted) when given: one row per position. Only what is not cached is computed, and the
        output layer runs only for the wanted rows (that layer dominates for a 262k vocabulary)."""
        full_len = self.prompt_len + len(self.ids) + len(extra)
        if positions is None:
            rows = max(1, min(rows, full_len))
            positions = range(full_len - rows, full_len)
        positions = list(positions)
        cached = len(self.cache_ids)
        last = full_len - 1
        if positions == [last] and not extra and self._valid == full_len == cached and self._last_logits is not None:
            return self._last_logits[None]
        if self.cancel is not None and self.cancel.is_set():
            raise Cancelled("Stopped by the user.")
        start = min(self._valid, positions[0], last)
        if start < cached:
            self.cache.crop(start - cached)
            del self.cache_ids[start:]
        full = self.prompt_ids + self.ids + list(extra)
        new = full[start:]
        keep = [p - start for p in positions]
        if keep == list(range(len(new) - len(keep), len(new))):
            to_keep: int | torch.Tensor = len(keep)  # a tail: the model's fast path
        else:
            to_keep = torch.tensor(keep, dtype=torch.long, device=self.device)
        t0 = time.perf_counter()
        input_ids = torch.tensor([new], dtype=torch.long, device=self.device)
        out = self.model(input_ids=input_ids, past_key_values=self.cache, use_cache=True, logits_to_keep=to_keep)
        logits = out.logits[0, -len(keep) :].float()
        self.stats.seconds += time.perf_counter() - t0
        self.stats.passes += 1
        self.stats.tokens += len(new)
        self.cache_ids.extend(new)
        self._valid = self.prompt_len + len(self.ids)
        self._last_logits = logits[-1] if positions[-1] == last else None
        return logits

    def next_logits(self) -> torch.Tensor:
        """The next-token logits after the prompt and the current response ids."""
        return self._run()[-1]

    def logits_with(self, extra: Sequence[int]) -> torch.Tensor:
        """Logits before each of ``extra`` and after the last: ``[len(extra) + 1, vocab]``, one pass."""
        return self._run(extra, rows=len(extra) + 1)

    def boundaries_from(self, offset: int) -> dict[int, int | None]:
        """This model's token edges at or after character ``offset``: edge -> index of the token starting
        there (None for the end of the text). No model call."""
        out: dict[int, int | None] = {}
        i = len(self.ids)
        while i > 0:
            start = self.token_start(i - 1)
            if start is not None and start < offset:
                break
            i -= 1
        for j in range(i, len(self.ids)):
            start = self.token_start(j)
            if start is not None and start >= offset and start not in out:
                out[start] = j
        if not self.pending and len(self.text) >= offset:
            out.setdefault(len(self.text), None)
        return out

    def distributions_from(self, offset: int, wanted: set[int] | None = None) -> list[tuple[int, int | None, torch.Tensor]]:
        """For every boundary of this model's tokens at or after character ``offset`` (only those in ``wanted``
        when given): the boundary, the token this model has there (None at the end of the text) and its
        next-token logits, all from one forward pass."""
        edges = [(b, i) for b, i in self.boundaries_from(offset).items() if wanted is None or b in wanted]
        if not edges:
            return []
        positions = [self.prompt_len + (len(self.ids) if i is None else i) - 1 for _, i in edges]
        rows = self._run(positions=positions)
        return [(b, None if i is None else self.ids[i], rows[r]) for r, (b, i) in enumerate(edges)]

    def draft(self, n: int, choose: Callable[[torch.Tensor], int]) -> list[tuple[int, torch.Tensor]]:
        """Generate up to ``n`` tokens from the current state; returns (token id, logits it was chosen from).

        Stops early at an end-of-sequence token (which is returned but not appended). Drafting continues past
        ``n`` (at most 4 tokens) while the last token ends inside a character, so drafts end on whole text.
        """
        out: list[tuple[int, torch.Tensor]] = []
        while len(out) < n or (self.pending and len(out) < n + 4):
            logits = self.next_logits()
            token_id = choose(logits)
            out.append((token_id, logits))
            if self.keys.key(token_id) == EOS_KEY:
                break
            self.append(token_id)
        return out

    def key_ids(self, key: str) -> list[int]:
        """Ids this model appends for a chosen key: its own token with that key if it has one."""
        return self.keys.encode_key(key)

    def reset_stats(self) -> None:
        self.stats = ForwardStats()


def _common_prefix(a: str, b: str) -> int:
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n
    while lo < hi:  # binary search on equal prefixes: C-speed slice comparisons
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _complete_prefix(data: bytes) -> int:
    """Length of the longest prefix of ``data`` that does not end inside a UTF-8 character.

    Invalid bytes count as complete (they decode to U+FFFD); only a valid but unfinished trailing
    sequence is held back.
    """
    n = len(data)
    for back in range(1, min(4, n) + 1):
        b = data[n - back]
        if b < 0x80:
            return n
        if b >= 0xC0:  # lead byte: how long should its sequence be?
            need = 2 if b < 0xE0 else 3 if b < 0xF0 else 4
            return n - back if back < need and b < 0xF8 else n
    return n
