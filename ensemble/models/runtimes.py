"""Which runtime computes a model's forward passes: transformers (any model, any device) or llama.cpp (GGUF files
on the CPU, :mod:`ensemble.members.llamacpp`), and what ``auto`` picks.

A model name may carry its runtime (``qwen@llamacpp``); otherwise the run's runtime setting (``--runtime``,
``ENSEMBLE_LENS_RUNTIME``, ``ModelPool(runtime=...)``) applies, and ``auto`` resolves per model here.
"""

from __future__ import annotations

import os

from ..errors import SettingsError
from .catalogue import ModelSpec

RUNTIMES = ("auto", "transformers", "llamacpp")
RUNTIME_ENV = "ENSEMBLE_LENS_RUNTIME"
RUNTIME_LABELS = {"auto": "automatic", "transformers": "transformers", "llamacpp": "llama.cpp"}
"""Each runtime's name for people (the app's runtime choices and status lines); the setting keeps the names above."""


def runtime_label(name: str) -> str:
    """A runtime's name for people: ``llama.cpp`` for ``llamacpp``; an unknown name as it is."""
    return RUNTIME_LABELS.get(name, name)


def split_runtime(name: str) -> tuple[str, str | None]:
    """``"qwen@llamacpp"`` -> ``("qwen", "llamacpp")``; a name without ``@runtime`` -> ``(name, None)``."""
    base, sep, runtime = (name or "").rpartition("@")
    if not sep or runtime not in RUNTIMES:
        return name, None
    return base, runtime


def check_runtime(runtime: str | None) -> str:
    """The runtime setting, checked (None and "" mean auto)."""
    runtime = (runtime or "auto").strip()
    if runtime not in RUNTIMES:
        raise SettingsError(f"Unknown runtime {runtime[:40]!r}: use one of {', '.join(RUNTIMES)}.")
    return runtime


def runtime_from_env() -> str:
    """The runtime ``ENSEMBLE_LENS_RUNTIME`` names (default auto); an unknown value is an error at startup."""
    return check_runtime(os.environ.get(RUNTIME_ENV))


def pick_runtime(spec: ModelSpec, asked: str | None, device: str = "cpu") -> str:
    """The runtime a model runs on. ``auto``: llama.cpp for an embedded model on the CPU when
    ``llama-cpp-python`` is installed (measured faster per token on reasoning prompts, docs/results.md "Members on
    llama.cpp": the drafter alone 3.04x, SAFE 2.22x, UniTE 5.12x, SpecEM 2.21x against bfloat16 transformers on
    2 cores; its first token comes later there, which ``--runtime transformers`` keeps), transformers otherwise — for any
    Hugging Face model id and folder, for GPUs, and where llama.cpp is missing."""
    asked = check_runtime(asked)
    if asked != "auto":
        return asked
    on_cpu = (device or "cpu").strip() in ("cpu", "auto") and not _gpu_asked(device)
    return "llamacpp" if spec.kind == "embedded" and on_cpu and llamacpp_available() else "transformers"


def llamacpp_available() -> bool:
    """Whether ``llama-cpp-python`` is installed (found, not imported)."""
    import importlib.util

    return importlib.util.find_spec("llama_cpp") is not None


def _gpu_asked(device: str | None) -> bool:
    if (device or "").strip() != "auto":
        return False
    try:
        import torch

        return torch.cuda.is_available()
    except ImportError:
        return False
