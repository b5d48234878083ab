"""The runtimes, registered like the methods: which runtime computes a model's forward passes, what each one can
do, and what ``auto`` picks.

Every runtime is one :class:`RuntimeInfo` in :data:`REGISTRY` (torch-free: the CLI, the app's controls and the
views read it): its capabilities, and the dotted names of the code that loads, prepares and computes it, imported
only when used. Nothing else compares a runtime's name (``tests/test_layers.py`` checks): a new runtime is one
module (its :class:`~ensemble.members.runtime.Runtime` subclass in ``ensemble/members/``, with its loader in
``ensemble/models/`` when this process holds its weights) and one registration here.

A model name may carry its runtime (``qwen@llamacpp``, :func:`split_runtime`); otherwise the run's runtime setting
(``--runtime``, ``ENSEMBLE_LENS_RUNTIME``, ``ModelPool(runtime=...)``) applies, and ``auto`` resolves per model here.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..errors import SettingsError
from .catalogue import SERVER_KIND

if TYPE_CHECKING:
    from .catalogue import ModelSpec

AUTO = "auto"
RUNTIME_ENV = "ENSEMBLE_LENS_RUNTIME"


@dataclass(frozen=True)
class RuntimeInfo:
    """A runtime's declared capabilities and the code it is made of.

    Attributes:
        name: its name (``--runtime``, ``name@runtime``, ``LoadedModel.runtime``).
        label: its name for people.
        whole_rows: it gives a position's whole row of logits, so any token id's probability (False: only its
            top ``top_k``).
        top_k: how many of a row's best ids it gives when not whole rows (None: whole rows).
        verify_in_line: it scores SpecEM's draft blocks after a shared context in one pass (``branch_scores``).
        remote: it computes outside this process.
        thread_safe: its passes release the GIL, so members on it compute at the same time in threads of one
            process (:class:`ensemble.members.local.ThreadBackend`), each with its own thread count.
        local_tokenizer: this process holds the model's tokenizer (the key tables come from it).
        package: the optional package it needs, as imported (``llama_cpp``); None: always installed.
        install: what to install when ``package`` is missing (the pip name).
        devices: the devices it computes on (``auto`` counts as the CPU there); None: any device.
        auto_on_cpu: ``auto`` picks it for the embedded models on the CPU when it is installed.
        by_name: a model's name picks it (``NAME=URL``: a server), never the runtime setting (``--runtime``, the
            app's runtime choices leave it out).
        tensors: its weights are a torch module (their dtype and tensors are read; otherwise the weights object
            gives ``size_bytes``).
        loader: ``module:function`` loading a model on it,
            ``(spec, base, device, dtype, progress, weights, runtime) -> LoadedModel``.
        computes: ``module:class``, its :class:`~ensemble.members.runtime.Runtime` (``for_loaded(loaded)`` builds
            one run's, ``warm(loaded)`` gets a model ready before the first run).
        prepares: ``module:function`` getting an embedded model's files ready for it, ``(name, progress, force)``;
            None: it reads no prepared files (``prepare`` and ``models`` skip it).
        folder: ``module:function``, the prepared folder of an embedded model's spec (None with ``prepares``).
    """

    name: str
    label: str
    loader: str
    computes: str
    prepares: str | None = None
    folder: str | None = None
    whole_rows: bool = True
    top_k: int | None = None
    verify_in_line: bool = True
    remote: bool = False
    thread_safe: bool = False
    local_tokenizer: bool = True
    package: str | None = None
    install: str = ""
    devices: tuple[str, ...] | None = None
    auto_on_cpu: bool = False
    tensors: bool = False
    by_name: bool = False

    @property
    def can_be_missing(self) -> bool:
        """It needs an optional package, which an installation may lack (:meth:`available` tells)."""
        return self.package is not None

    def available(self) -> bool:
        """Whether its package is installed (found, not imported)."""
        return self.package is None or importlib.util.find_spec(self.package) is not None

    def runs_on(self, device: str | None) -> bool:
        """Whether it computes on ``device`` (``auto`` is the CPU for a CPU-only runtime)."""
        return self.devices is None or (device or "cpu").strip() in (*self.devices, AUTO)

    def prepared(self, name: str) -> bool:
        """Whether an embedded model's files for this runtime are in the cache and pass their quick check."""
        from .catalogue import EMBEDDED
        from .integrity import verify_manifest

        if self.folder is None:
            return True
        spec = EMBEDDED.get(name)
        return spec is not None and verify_manifest(self.part("folder")(spec)) is None

    def part(self, what: str):
        """The code one of its ``module:name`` fields names (``loader``, ``computes``, ``prepares``, ``folder``)."""
        module, _, attr = getattr(self, what).partition(":")
        return getattr(importlib.import_module(module), attr)


REGISTRY: dict[str, RuntimeInfo] = {
    r.name: r
    for r in (
        RuntimeInfo(
            "transformers", "transformers", tensors=True,
            loader="ensemble.models.loading:load_transformers", computes="ensemble.members.transformers:CachedModel",
            prepares="ensemble.models:prepare", folder="ensemble.models.cache:model_cache",
        ),
        RuntimeInfo(
            "llamacpp", "llama.cpp", thread_safe=True, package="llama_cpp", install="llama-cpp-python",
            devices=("cpu",), auto_on_cpu=True,
            loader="ensemble.models.loading:load_llamacpp", computes="ensemble.members.llamacpp:LlamaCppModel",
            prepares="ensemble.models:prepare_gguf", folder="ensemble.models.cache:gguf_cache",
        ),
        RuntimeInfo(
            "server", "OpenAI-compatible server", whole_rows=False, top_k=20, remote=True, thread_safe=True, by_name=True,
            loader="ensemble.members.server:load_server", computes="ensemble.members.server:ServerModel",
        ),
    )
}
"""Every runtime, in the order the CLI and the app list them; the first is the default (any model, any device)."""

DEFAULT_RUNTIME = next(iter(REGISTRY))
"""The runtime of a model built in memory (:func:`ensemble.models.loading.wrap`) and what ``auto`` falls back to."""
RUNTIMES = (AUTO, *(r.name for r in REGISTRY.values() if not r.by_name))


def runtime_label(name: str) -> str:
    """A runtime's name for people (the app's runtime choices, status lines): its registered label, ``automatic``
    for ``auto``; an unknown name as it is."""
    return "automatic" if name == AUTO else REGISTRY[name].label if name in REGISTRY else name
"""The runtime setting's choices (the CLI's and the launcher's ``--runtime``)."""


def runtime_names() -> list[str]:
    """The registered runtimes' names (without ``auto``)."""
    return list(REGISTRY)


def runtime_info(name: str) -> RuntimeInfo:
    """A registered runtime's declaration; an unknown name is a :class:`SettingsError`."""
    found = REGISTRY.get(name) if isinstance(name, str) else None
    if found is None:
        raise SettingsError(f"Unknown runtime {str(name)[:40]!r}: use one of {', '.join(REGISTRY)}.")
    return found


def prepared_runtimes() -> list[str]:
    """The registered runtimes that read prepared files of the embedded models (``prepare --runtime all``)."""
    return [r.name for r in REGISTRY.values() if r.prepares is not None]


def available_runtimes() -> list[str]:
    """The registered runtimes this installation can run (an optional package may be missing)."""
    return [r.name for r in REGISTRY.values() if r.available() and not r.by_name]


def split_runtime(name: str) -> tuple[str, str | None]:
    """``"qwen@llamacpp"`` -> ``("qwen", "llamacpp")``; a name without ``@runtime`` -> ``(name, None)``.

    Only the last ``@`` splits, only when a runtime's name (or ``auto``) follows it, and never the ``@`` of a URL's
    ``user@host``: ``org/model@v2``, ``http://user@host:8001/v1`` and ``qwen=http://u@llamacpp/v1`` stay whole."""
    base, sep, runtime = (name or "").rpartition("@")
    if not sep or not (runtime == AUTO or runtime in REGISTRY) or _in_url_authority(base):
        return name, None
    return base, runtime


def _in_url_authority(before: str) -> bool:
    """Whether an ``@`` after ``before`` separates a URL's user from its host (``scheme://user@host``)."""
    _, scheme, rest = before.rpartition("://")
    return bool(scheme) and "/" not in rest


def check_runtime(runtime: str | None) -> str:
    """The runtime setting, checked (None and "" mean auto)."""
    runtime = (runtime or AUTO).strip()
    offered = (AUTO, *(r.name for r in REGISTRY.values() if not r.by_name))
    if runtime not in offered:
        raise SettingsError(f"Unknown runtime {runtime[:40]!r}: use one of {', '.join(offered)}.")
    return runtime


def runtime_from_env() -> str:
    """The runtime ``ENSEMBLE_LENS_RUNTIME`` names (default auto); an unknown value is an error at startup."""
    return check_runtime(os.environ.get(RUNTIME_ENV))


def pick_runtime(spec: ModelSpec, asked: str | None, device: str = "cpu") -> str:
    """The runtime a model runs on. ``auto``: llama.cpp (the runtime declared ``auto_on_cpu``) for an embedded
    model on the CPU when ``llama-cpp-python`` is installed (measured faster per token on reasoning prompts,
    docs/results.md "Members on llama.cpp": the drafter alone 3.04x, SAFE 2.22x, UniTE 5.12x, SpecEM 2.21x against
    bfloat16 transformers on 2 cores; its first token comes later there, which ``--runtime transformers`` keeps),
    transformers otherwise — for any Hugging Face model id and folder, for GPUs, and where llama.cpp is missing."""
    asked = check_runtime(asked)
    if spec.kind == SERVER_KIND:  # its URL says where it computes, whatever the run's runtime setting
        return next(r.name for r in REGISTRY.values() if r.remote)
    if asked != AUTO:
        return asked
    on_cpu = (device or "cpu").strip() in ("cpu", AUTO) and not _gpu_asked(device)
    if spec.kind == "embedded" and on_cpu:
        for runtime in REGISTRY.values():
            if runtime.auto_on_cpu and runtime.available():
                return runtime.name
    return DEFAULT_RUNTIME


def _gpu_asked(device: str | None) -> bool:
    if (device or "").strip() != AUTO:
        return False
    try:
        import torch

        return torch.cuda.is_available()
    except ImportError:
        return False
