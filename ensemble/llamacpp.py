"""Members on llama.cpp: the embedded GGUF files computed as shipped (Q4), through ``llama-cpp-python``'s C API.

Two classes, the same split as the transformers side:

- :class:`GGUFWeights` — a GGUF loaded once per process (``llama_model``), shared by every run; it also
  tokenizes with llama.cpp's own tokenizer, which :func:`check_tokenizer` compares with the transformers
  tokenizer of the same GGUF at load (key tables, templates and alignment stay on the transformers side).
- :class:`LlamaCppModel` — one run's runtime: a ``llama_context`` (its KV cache) with the interface of
  :class:`ensemble.cached.CachedModel` (``rows``, ``branch_scores``, ``drop``, ``close``, ``stats``,
  ``cancel``). It is handed all ids, keeps the longest prefix its KV cache holds
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
in threads of one process (``ensemble.members.base.ThreadBackend``); each context's thread count is its own.

llama.cpp's CPU kernels run on OpenMP, and the OpenMP runtime is the one torch loaded first (``libgomp.so.1``),
initialised from the environment the process started with. Nothing here sets ``OMP_WAIT_POLICY``: an earlier
version set it to ``PASSIVE`` before loading llama.cpp, which did nothing in a process that imports torch first,
and reached Ray's member processes only by accident, through the coordinator's environment. OpenMP's default (spin
a while at each barrier) is the fastest for a process with its cores to itself (qwen's decoding step 31 ms on two
threads, 49 ms with ``PASSIVE``); members sharing one machine get ``PASSIVE`` on purpose
(``ensemble.members.ray_backend.SHARED_CORES_ENV``). A user's own setting is left as it is everywhere.
"""

from __future__ import annotations

import ctypes
import os
import threading
import time
from collections.abc import Sequence
from functools import cache
from pathlib import Path

import numpy as np
import torch

from .cached import ForwardStats
from .errors import Cancelled, EnsembleError, LlamaCppMissing, ModelLoadError
from .response import common_prefix

LLAMA_CPP_VERSION = "0.3.36"
MAX_CONTEXT = 8192
"""Context cells per run (a run's prompt is at most 2048 tokens by default and its budget at most 4096)."""
MAX_BLOCKS = 15
"""Draft blocks one verify-in-line pass can hold (one llama.cpp sequence each, after the context's)."""
SHARED_PASS = 16
"""Cells another run may reuse come from passes of at least this many tokens, and its first pass evaluates at least
this many: llama.cpp's CPU kernels give a row the same bits in any pass of 8 or more tokens, but other bits in
passes of 1-7 (measured on qwen and gemma3, up to 0.71 logits apart; smollm2's Q4_1 the same in all), so twice
that is used (``tests/test_llamacpp.py`` checks the equality)."""
IDLE_CONTEXTS = 2
"""Contexts a GGUF keeps for later runs when a run ends (:class:`GGUFWeights` ``idle``): each holds a KV buffer of
``MAX_CONTEXT`` cells (qwen 100 MB, smollm2 190 MB, gemma3 150 MB)."""


@cache
def lib():
    """The ``llama_cpp`` module, initialised once (its log output silenced unless ENSEMBLE_LENS_LLAMA_LOG=1)."""
    try:
        import llama_cpp
    except ImportError as exc:
        raise LlamaCppMissing(
            f"The llama.cpp runtime needs llama-cpp-python=={LLAMA_CPP_VERSION} (make deps builds it once into "
            "~/.cache/ensemble-lens-wheels): pip install llama-cpp-python==" + LLAMA_CPP_VERSION
        ) from exc
    llama_cpp.llama_backend_init()
    if os.environ.get("ENSEMBLE_LENS_LLAMA_LOG") != "1":
        _callbacks.append(llama_cpp.llama_log_callback(_quiet))
        llama_cpp.llama_log_set(_callbacks[-1], ctypes.c_void_p(0))
    return llama_cpp


def _quiet(level, text, user_data):  # llama.cpp's log callback: drop everything
    return None


_callbacks: list = []  # ctypes callbacks handed to llama.cpp live as long as the process


def default_threads() -> int:
    """Threads of a member context unless its role sets them (``ThreadBackend.assign``): the machine's cores, as a
    member that computes alone (members taking turns, a drafter drafting) is fastest with all of them (measured in
    docs/results.md "Members on llama.cpp"); ``ENSEMBLE_LENS_LLAMA_THREADS`` overrides it."""
    value = os.environ.get("ENSEMBLE_LENS_LLAMA_THREADS", "")
    return max(1, int(value)) if value.isdigit() else max(1, os.cpu_count() or 1)


class GGUFWeights:
    """A GGUF file loaded by llama.cpp, shared by every run of this process.

    Args:
        path: the ``.gguf`` file.
        name: the model's name, for messages.
    """

    def __init__(self, path: str | Path, name: str = "model"):
        ll = lib()
        self.path, self.name = str(path), name
        params = ll.llama_model_default_params()
        params.use_mmap = True
        # No extra buffer types (AMX, repacked weights): a build with llama.cpp's AMX kernels (any -march=native build
        # on an AMX CPU) crashed in its first decode here (SIGSEGV in ggml_backend_amx_mul_mat), and in the build
        # `make deps` makes (AMX left out) repacking measured no faster: qwen 24.5 vs 23.0 tok/s decoding, the same
        # prompt speed. Every kernel is then the plain CPU one, whoever built the wheel.
        params.use_extra_bufts = False
        self.ptr = ll.llama_model_load_from_file(self.path.encode(), params)
        if not self.ptr:
            raise ModelLoadError(f"llama.cpp could not load {name!r} from {self.path}.")
        self.vocab = ll.llama_model_get_vocab(self.ptr)
        self.n_vocab = int(ll.llama_vocab_n_tokens(self.vocab))
        self.n_ctx_train = int(ll.llama_model_n_ctx_train(self.ptr))
        self.n_params = int(ll.llama_model_n_params(self.ptr))
        self.size_bytes = int(ll.llama_model_size(self.ptr))
        self.context_limit = min(self.n_ctx_train or MAX_CONTEXT, MAX_CONTEXT)
        self.idle: list[_Context] = []  # contexts of ended runs, the most recent last (LlamaCppModel takes them)
        self._idle_lock = threading.Lock()

    def take_context(self) -> _Context | None:
        """The most recently ended run's context with its KV cells, or None (the caller makes one)."""
        with self._idle_lock:
            return self.idle.pop() if self.idle else None

    def keep_context(self, context: _Context) -> None:
        """Keep an ended run's context for the next run (the oldest beyond ``IDLE_CONTEXTS`` is freed)."""
        with self._idle_lock:
            self.idle.append(context)
            extra = self.idle[:-IDLE_CONTEXTS]
            del self.idle[:-IDLE_CONTEXTS]
        for old in extra:
            old.free()

    def free_idle(self) -> None:
        """Free every kept context (their memory; the next run makes a fresh one)."""
        with self._idle_lock:
            idle, self.idle = self.idle, []
        for context in idle:
            context.free()

    def tokenize(self, text: str, special: bool = False) -> list[int]:
        """llama.cpp's own token ids of ``text`` (no BOS; special tokens parsed only when asked)."""
        ll = lib()
        data = text.encode("utf-8", "surrogatepass")
        room = len(data) + 8
        buf = (ll.llama_token * room)()
        n = ll.llama_tokenize(self.vocab, data, len(data), buf, room, False, special)
        if n < 0:  # cannot happen (a token has at least one byte), but the API allows it
            room = -n
            buf = (ll.llama_token * room)()
            n = ll.llama_tokenize(self.vocab, data, len(data), buf, room, False, special)
        return list(buf[:n])

    def close(self) -> None:
        if getattr(self, "ptr", None):
            self.free_idle()
            lib().llama_model_free(self.ptr)
            self.ptr = None

    def __del__(self):
        try:  # noqa: SIM105 - at interpreter shutdown even the contextlib module may be gone
            self.close()
        except Exception:  # noqa: BLE001 - the library may be unloaded already: nothing left to free
            pass

    # A model handle cannot be pickled; a Ray member loads the GGUF by path in its own process instead.
    def __reduce__(self):
        return (GGUFWeights, (self.path, self.name))


TOKENIZER_PROBES = (
    "Sofia went to Plovdiv in 1999.",
    "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May.",
    "def f(x):\n    return x**2  # square\n\n\tprint(f(3))",
    "  leading spaces,   runs of spaces\n\n\nand newlines \r\n",
    "東京は日本の首都です。北京是中国的首都。",
    "emoji 🙂👍🏽 and accents: café naïve Ångström",
    "$12.50 + 3.75 = 16.25; 1,234,567 × 8 ÷ 2",
    "<think> not a tag </think> [INST] <|im_start|>",
)
"""Texts whose ids the two tokenizers must agree on: names, numbers, code, whitespace, CJK, emoji, markup."""


def check_tokenizer(weights: GGUFWeights, tokenizer, name: str) -> None:
    """Raise :class:`ModelLoadError` unless llama.cpp and transformers tokenize the probes to the same ids."""
    for text in TOKENIZER_PROBES:
        ours = tokenizer(text, add_special_tokens=False)["input_ids"]
        theirs = weights.tokenize(text, special=True)  # transformers matches special tokens in text too
        if ours != theirs:
            at = common_prefix(ours, theirs)
            raise ModelLoadError(
                f"Model {name!r}: llama.cpp and transformers tokenize {text[:40]!r} differently (from token {at}: "
                f"{ours[at:at + 4]} vs {theirs[at:at + 4]}); the llama.cpp runtime needs identical ids. "
                "Use --runtime transformers for this model."
            )


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


class LlamaCppModel:
    """One run's forward passes on llama.cpp: a context whose KV cache follows the ids it is asked about.

    Args:
        weights: the loaded GGUF (shared).
        threads: threads of this context's passes (default :func:`default_threads`).

    The context is the last ended run's when the GGUF kept one (see the module's docstring): its cells count as
    this run's cache from the first pass on, which evaluates at least ``SHARED_PASS`` tokens.
    """

    gil_free = True  # its passes are C calls that release the GIL: members can compute in threads

    def __init__(self, weights: GGUFWeights, threads: int | None = None):
        self.weights = weights
        self.device = torch.device("cpu")
        self.stats = ForwardStats()
        self.cancel: threading.Event | None = None
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

    def check_cancel(self) -> None:
        if self.cancel is not None and self.cancel.is_set():
            raise Cancelled("Stopped by the user.")

    def _crop(self, keep: int) -> None:
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
        self.stats.seconds += time.perf_counter() - t0
        self.stats.passes += 1
        self.stats.tokens += len(entries)

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
        self._crop(start)
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
        (``[2, tokens]``, as :meth:`ensemble.cached.CachedModel.branch_scores`). The cache keeps the context."""
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
