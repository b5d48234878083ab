"""The process-wide model pool: each model loads once and is shared by every run, within a memory budget."""

from __future__ import annotations

import os
import threading
from collections import OrderedDict

from ..tokens.key_table import KeyTable
from .catalogue import EMBEDDED, GPU_PRESETS, Progress, quiet_progress, resolve
from .device import check_dtype
from .loading import LoadedModel, load, load_tokenizer
from .runtimes import check_runtime, pick_runtime, runtime_info, split_runtime

POOL_GB = "ENSEMBLE_LENS_POOL_GB"
DEFAULT_POOL_GB = 8.0


def model_bytes(loaded: LoadedModel) -> int:
    """Memory held by a model's weights and buffers."""
    if not loaded.has_weights:
        return 0  # a skeleton on the meta device holds no memory
    if not runtime_info(loaded.runtime).tensors:
        return loaded.model.size_bytes  # its weights object says (a GGUF's tensors, memory-mapped)
    model = loaded.model
    tensors = [*model.parameters(), *model.buffers()]
    return sum(t.numel() * t.element_size() for t in tensors)


class ModelPool:
    """Process-wide registry: each model loads once and is shared by all runs and sessions.

    The pool has a memory budget (``max_gb``; default ``ENSEMBLE_LENS_POOL_GB`` or 8 GB; 0 = none): when the
    loaded weights exceed it, the least recently used models are dropped (a run that still holds one keeps it
    until it ends). The models of one :meth:`get_many` call are never evicted by each other, so the budget
    should hold the largest ensemble; the three embedded models take about 2.1 GB in bfloat16, 4.1 GB in float32.

    The pool holds weights only: where members compute is the caller's choice (:mod:`ensemble.members`). With
    ``weights=False`` it loads tokenizers and configs only (a process backend loads the weights in its member
    processes).
    """

    def __init__(
        self,
        device: str = "cpu",
        dtype: str = "auto",
        max_gb: float | None = None,
        weights: bool = True,
        runtime: str | None = None,
    ):
        self.device, self.dtype = device, check_dtype(dtype)
        # transformers | llamacpp | auto (per model, models/runtimes.py); a name's own "@runtime" wins
        self.runtime = check_runtime(runtime)
        # False: tokenizers and configs only, the weights load in member processes (a process backend's pool)
        self.weights = weights
        if max_gb is None:
            max_gb = float(os.environ.get(POOL_GB) or DEFAULT_POOL_GB)
        self.max_bytes = int(max_gb * 1e9) if max_gb > 0 else None
        self._models: OrderedDict[str, LoadedModel] = OrderedDict()  # least recently used first
        self.unavailable: dict[str, str] = {}  # what warm() could not load, name -> why (a server shows the others)
        self._sizes: dict[str, int] = {}
        self._tokenizers: dict[str, KeyTable] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()

    def _lock_for(self, name: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(name, threading.Lock())

    def _key(self, name: str) -> str:
        """One entry per model and runtime: a folder named two ways ("/m", "/m/.", "~/m") is one model."""
        base, asked = split_runtime(name)
        spec = resolve(base)
        where = base if base in EMBEDDED or base in GPU_PRESETS else spec.location if spec.kind == "local" else base
        return f"{where}@{pick_runtime(spec, asked or self.runtime, self.device)}"

    def get(self, name: str, progress: Progress | None = None, keep: frozenset[str] = frozenset()) -> LoadedModel:
        key = self._key(name)
        with self._guard:
            found = self._models.get(key)
            if found is not None:
                self._models.move_to_end(key)
                return found
        with self._lock_for(key):
            if key not in self._models:
                loaded = load(name, self.device, self.dtype, progress, weights=self.weights, runtime=self.runtime)
                with self._guard:
                    self._models[key] = loaded
                    self._sizes[key] = model_bytes(loaded)
                    self._evict_beyond_budget(keep | {key})
            with self._guard:
                self._models.move_to_end(key)
                return self._models[key]

    def _evict_beyond_budget(self, keep: set[str] | frozenset[str]) -> None:
        if self.max_bytes is None:
            return
        for key in list(self._models):
            if sum(self._sizes.values()) <= self.max_bytes:
                return
            if key not in keep:
                del self._models[key]
                self._sizes.pop(key, None)

    def warm(self, names: list[str]) -> list[str]:
        """Load these models before any run; returns what could not be loaded, one message each, instead of raising
        (a server keeps serving) and remembers it in :attr:`unavailable`. Members get ready with
        :func:`ensemble.members.warm`, which calls this."""
        from ..errors import EnsembleError

        problems = []
        for name in names:
            try:
                self.get(name)
                self.unavailable.pop(name, None)
            except EnsembleError as exc:
                self.unavailable[name] = str(exc)
                problems.append(f"{name} is not available: {exc}")
        return problems

    def get_many(self, names: list[str], progress: Progress | None = None) -> list[LoadedModel]:
        keep = frozenset(self._key(n) for n in names)
        return [self.get(n, progress, keep) for n in names]

    def held_bytes(self) -> int:
        """Bytes of weights the pool holds now."""
        with self._guard:
            return sum(self._sizes.values())

    def keys(self, name: str) -> KeyTable:
        """The key table of a model, from the loaded model when there is one, else tokenizer only (the same
        on either runtime: both use the transformers tokenizer)."""
        name = split_runtime(name)[0]
        key = self._key(name)
        found = self._models.get(key)
        if found is not None:
            return found.keys
        with self._lock_for("tok:" + key):
            if key not in self._tokenizers:
                self._tokenizers[key] = load_tokenizer(name, quiet_progress)[1]
            return self._tokenizers[key]

    def loaded(self) -> list[str]:
        """The loaded models, least recently used first, as ``name@runtime``."""
        return list(self._models)
