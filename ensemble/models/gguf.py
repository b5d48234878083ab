"""A GGUF file loaded by llama.cpp (``llama-cpp-python``'s C API): the weights of a model the llama.cpp runtime
computes (:mod:`ensemble.members.llamacpp`), loaded once per process and shared by every run.

:class:`GGUFWeights` also tokenizes with llama.cpp's own tokenizer, which :func:`check_tokenizer` compares with the
transformers tokenizer of the same GGUF at load (key tables, templates and alignment stay on the transformers side),
and keeps the contexts of ended runs for the next ones (``IDLE_CONTEXTS``; the runtime makes and reads them).
"""

from __future__ import annotations

import _thread
import ctypes
import os
import signal
import threading
import time
from functools import cache
from pathlib import Path

from ..errors import LlamaCppMissing, ModelLoadError
from ..tokens.response import common_prefix

LLAMA_CPP_VERSION = "0.3.36"
MAX_CONTEXT = 8192
"""Context cells per run (a run's prompt is at most 2048 tokens by default and its budget at most 4096)."""
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
        guard_interrupts()
    return llama_cpp


def _quiet(level, text, user_data):  # llama.cpp's log callback: drop everything
    return None


_CALLBACK_CODES = {_quiet.__code__}
"""The Python callbacks llama.cpp calls from C. An exception raised in one cannot travel through the C frames:
ctypes prints "Exception ignored on calling ctypes callback function" and drops it. Ctrl-C's KeyboardInterrupt is
raised wherever the main thread runs Python when the signal comes, and during a model load or a decode that is
mostly this callback, so without :func:`guard_interrupts` a Ctrl-C there was lost and ``evaluate`` went on."""
_pending = threading.Event()


def guard_interrupts() -> None:
    """Keep Ctrl-C from being lost in a llama.cpp callback: while Python's own SIGINT handler is in place (the main
    thread of a command, not a server that installed its own), replace it by one that raises KeyboardInterrupt as
    before, except inside a callback, where it only notes the interrupt; a helper thread then delivers it again
    every 10 ms (``_thread.interrupt_main``) until it lands outside a callback, as soon as the C call returns."""
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _on_interrupt)


def _on_interrupt(signum, frame):
    global _raised_at
    if _in_callback(frame):
        with _lock:
            if not _pending.is_set():
                _pending.set()
                threading.Thread(target=_deliver_again, name="interrupt-again", daemon=True).start()
        return
    with _lock:
        again = not _pending.is_set() and time.monotonic() - _raised_at < 0.05
        _pending.clear()
        if again:  # a redelivery that crossed the raise it was meant for: one Ctrl-C, one KeyboardInterrupt
            return
        _raised_at = time.monotonic()
    raise KeyboardInterrupt


def _in_callback(frame) -> bool:
    while frame is not None:
        if frame.f_code in _CALLBACK_CODES:
            return True
        frame = frame.f_back
    return False


def _deliver_again() -> None:
    while _pending.is_set():
        time.sleep(0.01)
        with _lock:
            if _pending.is_set():
                _thread.interrupt_main(signal.SIGINT)


_lock = threading.RLock()  # re-entrant: a second Ctrl-C may run the handler inside the first
_raised_at = -1.0
_callbacks: list = []  # ctypes callbacks handed to llama.cpp live as long as the process


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
        self.idle: list = []  # contexts of ended runs (the runtime's), the most recent last (LlamaCppModel takes them)
        self._idle_lock = threading.Lock()

    def take_context(self):
        """The most recently ended run's context with its KV cells, or None (the caller makes one)."""
        with self._idle_lock:
            return self.idle.pop() if self.idle else None

    def keep_context(self, context) -> None:
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
