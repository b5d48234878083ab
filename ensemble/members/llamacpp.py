"""The llama.cpp runtime: the embedded GGUF files computed as shipped (Q4), through ``llama-cpp-python``'s C API.

The same split as the transformers side: the weights are :class:`ensemble.models.gguf.GGUFWeights` (a GGUF loaded
once per process, shared by every run); :class:`LlamaCppModel` is one run's
:class:`~ensemble.members.runtime.Runtime`, a ``llama_context`` (its KV cache). It is handed all ids, keeps the longest prefix its KV cache holds
  (``llama_memory_seq_rm`` drops the rest) and evaluates only the new ids, asking llama.cpp for logits only
  at the wanted positions (the output layer is most of a small model's cost: 262k rows for Gemma).

A run that ends hands its context back to the GGUF (:class:`GGUFWeights` keeps ``IDLE_CONTEXTS``), and the next
run takes it with its KV cells: making a context costs 0.06-0.7 s here (its buffers), and the next run shares at
least the chat template's head with the last one, often its whole prompt (Compare, a fork, a re-run). Reused
cells give the rows a fresh context gives, bit for bit: only cells written by passes of ``SHARED_PASS`` or more
tokens are reused (there llama.cpp computes each row on its own, flash attention being off; short passes use other
kernels, whose logits differ), and the new run's first pass evaluates at least that many tokens.

Verify-in-line (SpecEM §3.2) maps onto llama.cpp's sequences: the context's cells are shared with one
sequence per draft block (``llama_memory_seq_cp``, no copy of keys and values in a unified cache), every block
is evaluated in one batch with its own sequence id and positions restarting after the context, and llama.cpp's
per-sequence causal mask keeps the blocks apart — the 4-D mask of the transformers side, without building it.

ctypes releases the GIL for the duration of every C call, so members on this runtime compute at the same time
in threads of one process (``ensemble.members.local.ThreadBackend``); each context's thread count is its own.

llama.cpp's CPU kernels run on OpenMP, and the OpenMP runtime is the one torch loaded first (``libgomp.so.1``),
initialised from the environment the process started with. Nothing here sets ``OMP_WAIT_POLICY``: an earlier
version set it to ``PASSIVE`` before loading llama.cpp, which did nothing in a process that imports torch first,
and reached Ray's member processes only by accident, through the coordinator's environment. OpenMP's default (spin
a while at each barrier) is the fastest for a process with its cores to itself (qwen's decoding step 31 ms on two
threads, 49 ms with ``PASSIVE``); members sharing one machine get ``PASSIVE`` on purpose
(``ensemble.members.ray.backend.SHARED_CORES_ENV``). A user's own setting is left as it is everywhere.
"""


from __future__ import annotations

import os
import threading
import time
from collections.abc import Sequence

import numpy as np
import torch

from ..errors import EnsembleError, ModelLoadError
from ..models.gguf import GGUFWeights, lib
from ..models.runtimes import runtime_info
from ..tokens.response import common_prefix
from .runtime import ForwardStats, Runtime

MAX_BLOCKS = 15
"""Draft blocks one verify-in-line pass can hold (one llama.cpp sequence each, after the context's)."""
SHARED_PASS = 16
"""Cells another run may reuse come from passes of at least this many tokens, and its first pass evaluates at least
this many: llama.cpp's CPU kernels give a row the same bits in any pass of 8 or more tokens, but other bits in
passes of 1-7 (measured on qwen and gemma3, up to 0.71 logits apart; smollm2's Q4_1 the same in all), so twice
that is used (``tests/ensemble/members/test_llamacpp.py`` checks the equality)."""

def default_threads() -> int:
    """Threads of a member context unless its role sets them (``ThreadBackend.member_threads``): the machine's cores, as a
    member that computes alone (members taking turns, a drafter drafting) is fastest with all of them (measured in
    docs/results.md "Members on llama.cpp"); ``ENSEMBLE_LENS_LLAMA_THREADS`` overrides it."""
    value = os.environ.get("ENSEMBLE_LENS_LLAMA_THREADS", "")
    return max(1, int(value)) if value.isdigit() else max(1, os.cpu_count() or 1)


class _Context:
    """A ``llama_context`` with its batch and what its KV cache holds, handed from run to run by
    :class:`GGUFWeights` (``take_context`` / ``keep_context``).

    Attributes:
        ids: the ids whose cells the cache holds (sequence 0), in order.
        exact: how many leading cells passes of ``SHARED_PASS`` or more tokens wrote (only those are reused by
            another run).
        threads: the context's thread count.
    """

    def __init__(self, weights: GGUFWeights, threads: int):
        ll = lib()
        params = ll.llama_context_default_params()
        params.n_ctx = weights.context_limit
        params.n_batch = weights.context_limit
        params.n_ubatch = min(512, weights.context_limit)
        params.n_seq_max = MAX_BLOCKS + 1
        params.kv_unified = True  # every sequence sees all cells: the context's cells are shared, not split
        params.swa_full = True  # sliding-window layers keep every cell, so any prefix can be cut back to (Gemma)
        params.no_perf = True
        # Flash attention off: with it, a position's logits depend on how the ids were split into passes (up to
        # 1.7 logits apart on Gemma); without it a pass split anywhere gives the same rows bit for bit (tested),
        # so a cut-back cache equals one evaluated afresh.
        params.flash_attn_type = 0
        params.n_threads = params.n_threads_batch = threads
        self.ctx = ll.llama_init_from_model(weights.ptr, params)
        if not self.ctx:
            raise ModelLoadError(f"llama.cpp could not make a context for {weights.name!r} ({weights.context_limit} tokens).")
        self.mem = ll.llama_get_memory(self.ctx)
        self.batch = ll.llama_batch_init(weights.context_limit, 0, MAX_BLOCKS + 1)
        self.threads = threads
        self.ids: list[int] = []
        self.exact = 0

    def reusable(self) -> int:
        """How many leading cells another run may reuse: those written by long passes (``SHARED_PASS``)."""
        return self.exact

    def wrote(self, start: int, n: int) -> None:
        """A pass wrote ``n`` cells from ``start`` on: a long one extends the exact prefix it continues."""
        self.exact = start + n if n >= SHARED_PASS and start <= self.exact else min(self.exact, start)

    def clear(self) -> None:
        lib().llama_memory_clear(self.mem, True)
        self.ids, self.exact = [], 0

    def free(self) -> None:
        ll = lib()
        ll.llama_batch_free(self.batch)
        ll.llama_free(self.ctx)
        self.ids, self.exact = [], 0


class LlamaCppModel(Runtime):
    """One run's forward passes on llama.cpp: a context whose KV cache follows the ids it is asked about.

    Args:
        weights: the loaded GGUF (shared).
        threads: threads of this context's passes (default :func:`default_threads`).

    The context is the last ended run's when the GGUF kept one (see the module's docstring): its cells count as
    this run's cache from the first pass on, which evaluates at least ``SHARED_PASS`` tokens.
    """

    gil_free = runtime_info("llamacpp").thread_safe  # as registered: its passes are C calls that release the GIL

    def __init__(self, weights: GGUFWeights, threads: int | None = None):
        self.weights = weights
        self.device = torch.device("cpu")
        self.stats = ForwardStats()
        self.n_ctx = weights.context_limit
        self._threads = threads or default_threads()
        context = weights.take_context()
        self._recycled = context is not None
        if context is None:
            context = _Context(weights, self._threads)
        elif context.threads != self._threads:
            lib().llama_set_n_threads(context.ctx, self._threads, self._threads)
            context.threads = self._threads
        self._c = context
        self._closed = False
        self._clean = True
        self._last_logits: torch.Tensor | None = None
        # One pass at a time, and close() waits for a running one: a run that ends (Stop, an error) frees its
        # contexts while a member thread may still be inside llama_decode.
        self._busy = threading.RLock()

    # -- state -------------------------------------------------------------------------------------------
    @classmethod
    def for_loaded(cls, loaded) -> LlamaCppModel:
        return cls(loaded.model)

    @classmethod
    def warm(cls, loaded) -> int:
        return warm_context(loaded)

    @classmethod
    def forget_prompts(cls, loaded) -> None:
        """Cut every context kept for the next run back to the template head (the cells every run shares)."""
        weights = loaded.model
        if not loaded.has_weights or not hasattr(weights, "take_context"):
            return
        head = loaded.template_head()
        kept = []
        while (context := weights.take_context()) is not None:
            kept.append(context)
        for context in reversed(kept):
            keep = min(common_prefix(context.ids, head), context.exact)
            lib().llama_memory_seq_rm(context.mem, 0, keep, -1)
            del context.ids[keep:]
            context.exact = min(context.exact, keep)
            weights.keep_context(context)

    @property
    def cache_ids(self) -> list[int]:
        """The ids the KV cache holds."""
        return self._c.ids

    @property
    def recycled(self) -> bool:
        """Whether this run's context came from an earlier run (until its first pass)."""
        return self._recycled

    @property
    def threads(self) -> int:
        return self._threads

    @threads.setter
    def threads(self, value: int | None) -> None:
        value = value or default_threads()
        if value != self._threads and not self._closed:
            lib().llama_set_n_threads(self._c.ctx, value, value)
            self._c.threads = value
        self._threads = value

    def drop(self) -> None:
        """Forget the KV cache."""
        with self._busy:
            if not self._closed:
                self._c.clear()
            self._recycled = False
            self._last_logits = None

    def close(self) -> None:
        """End the run: after any pass in flight, hand the context (and its KV cells) back to the GGUF for the
        next run; later passes are refused. A pass that failed may leave cells its ids do not describe, so that
        context is freed instead."""
        with self._busy:
            if self._closed:
                return
            self._closed = True
            self._last_logits = None
            context = self._c
            if getattr(self.weights, "ptr", None) and self._clean:
                self.weights.keep_context(context)
            else:
                context.free()

    def __del__(self):
        try:  # noqa: SIM105 - at interpreter shutdown even the contextlib module may be gone
            self.close()
        except Exception:  # noqa: BLE001 - the library may be unloaded already: nothing left to free
            pass

    def crop(self, keep: int) -> None:
        c = self._c
        if keep < len(c.ids):
            lib().llama_memory_seq_rm(c.mem, 0, keep, -1)
            del c.ids[keep:]
            c.exact = min(c.exact, keep)
            self._last_logits = None

    # -- passes ------------------------------------------------------------------------------------------
    def _decode(self, entries: list[tuple[int, int, int, bool]]) -> None:
        """One ``llama_decode`` of (token, position, sequence, wants logits) entries."""
        if self._closed:
            raise EnsembleError(f"The llama.cpp context of {self.weights.name} is closed.")
        ll = lib()
        batch = self._c.batch
        for i, (token, pos, seq, out) in enumerate(entries):
            batch.token[i] = token
            batch.pos[i] = pos
            batch.n_seq_id[i] = 1
            batch.seq_id[i][0] = seq
            batch.logits[i] = out
        batch.n_tokens = len(entries)
        t0 = time.perf_counter()
        self._clean = False  # until the pass returns: a context left mid-pass is not handed to another run
        code = ll.llama_decode(self._c.ctx, batch)
        self._clean = code == 0
        if code != 0:
            raise EnsembleError(f"llama.cpp failed to evaluate {len(entries)} token(s) of {self.weights.name} (code {code}).")
        self.stats.count(time.perf_counter() - t0, len(entries))

    def _row(self, index: int) -> np.ndarray:
        ptr = lib().llama_get_logits_ith(self._c.ctx, index)
        return np.ctypeslib.as_array(ptr, shape=(self.weights.n_vocab,))

    def rows(self, ids: Sequence[int], positions: Sequence[int]) -> torch.Tensor:
        """Logits (float32) after each of ``positions`` (absolute, sorted) of ``ids``: one row per position.
        Afterwards the cache holds all of ``ids``."""
        with self._busy:
            return self._rows(list(ids), list(positions))

    def _rows(self, ids: list[int], positions: list[int]) -> torch.Tensor:
        last, c = len(ids) - 1, self._c
        if positions == [last] and self._last_logits is not None and ids == c.ids:
            return self._last_logits[None]
        if len(ids) > self.n_ctx:
            raise EnsembleError(f"{self.weights.name}: {len(ids)} tokens do not fit its llama.cpp context of {self.n_ctx}.")
        self.check_cancel()
        start = min(common_prefix(c.ids, ids), positions[0], last)
        if self._recycled:  # another run's cells: only batch-written ones, and a pass a fresh context would batch too
            start = min(start, c.reusable(), max(0, len(ids) - SHARED_PASS))
            self._recycled = False
        self.crop(start)
        wanted = set(positions)
        new = ids[start:]
        self._decode([(t, start + i, 0, start + i in wanted) for i, t in enumerate(new)])
        c.ids.extend(new)
        c.wrote(start, len(new))
        logits = torch.from_numpy(np.stack([self._row(p - start) for p in positions]))
        self._last_logits = logits[-1] if positions[-1] == last else None
        return logits

    def branch_scores(self, ctx: int, blocks: list[list[int]], targets: list[int]) -> torch.Tensor:
        """Verify-in-line (SpecEM §3.2) over the cached context of ``ctx`` ids: every block in one batch, one
        sequence each, and for each block token the log-probability and raw logit of its ``targets`` entry
        (``[2, tokens]``, as :meth:`ensemble.members.transformers.CachedModel.branch_scores`). The cache keeps the context."""
        with self._busy:
            return self._branch_scores(ctx, blocks, targets)

    def _branch_scores(self, ctx: int, blocks: list[list[int]], targets: list[int]) -> torch.Tensor:
        if len(blocks) > MAX_BLOCKS:
            raise EnsembleError(f"llama.cpp verify-in-line holds at most {MAX_BLOCKS} drafts, not {len(blocks)}.")
        if ctx != len(self.cache_ids):
            raise EnsembleError(f"{self.weights.name}: verify-in-line needs the cache at the context ({ctx} ids), it holds {len(self.cache_ids)}.")
        if ctx + sum(len(b) for b in blocks) > self.n_ctx:
            raise EnsembleError(f"{self.weights.name}: the drafts do not fit its llama.cpp context of {self.n_ctx}.")
        self.check_cancel()
        ll, mem = lib(), self._c.mem
        for seq in range(1, len(blocks) + 1):
            ll.llama_memory_seq_cp(mem, 0, seq, -1, -1)
        entries = [(t, ctx + i, seq, True) for seq, block in enumerate(blocks, 1) for i, t in enumerate(block)]
        try:
            self._decode(entries)
            logits = torch.from_numpy(np.stack([self._row(i) for i in range(len(entries))]))
        finally:
            for seq in range(1, len(blocks) + 1):
                ll.llama_memory_seq_rm(mem, seq, -1, -1)
        index = torch.tensor(targets, dtype=torch.long)[:, None]
        raw = logits.gather(1, index)[:, 0]
        logp = torch.log_softmax(logits, dim=-1).gather(1, index)[:, 0]
        return torch.stack([logp, raw])


def warm_context(loaded) -> int:
    """On llama.cpp with the weights in this process: make the first run's context now and read the template head
    into it (contexts are handed from run to run, so the first run then starts where every run starts). Returns the
    ids read; weightless skeletons: nothing to do, 0 (:meth:`LlamaCppModel.warm`, for models on llama.cpp only)."""
    if not loaded.has_weights:
        return 0
    head = loaded.template_head()
    read = head if len(head) >= SHARED_PASS else []  # shorter heads are not reused (a short pass writes them)
    runtime = LlamaCppModel(loaded.model)
    try:
        if read:
            runtime.rows(read, [len(read) - 1])
    finally:
        runtime.close()
    return len(read)
