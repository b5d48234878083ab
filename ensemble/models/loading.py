"""Loading a model by name: from the embedded cache, the hub or a folder, as a :class:`LoadedModel`.

``trust_remote_code`` is never enabled.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from ..errors import ModelLoadError
from ..tokens.key_table import KeyTable
from ..tokens.response import common_prefix
from .cache import is_cached, prepare, prepare_gguf
from .catalogue import ModelSpec, Progress, hub_fallback_enabled, hub_reachable, missing_packages, resolve, stderr_progress
from .device import resolve_device, resolve_dtype
from .hub_errors import hub_error_message
from .runtimes import pick_runtime, runtime_info, split_runtime
from .templates import PLAIN_STOPS, PromptTemplate


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
    source: str  # a Source (a str enum), or what a caller of wrap() named it
    context_limit: int
    info: dict = field(default_factory=dict)
    load_args: tuple | None = None  # (name, device, dtype, runtime) it was loaded with (a member process loads it so); None: built in memory
    has_weights: bool = True  # False: a weightless skeleton (meta device) whose forward passes run in member processes
    runtime: str = "transformers"  # what computes its forward passes: "transformers" (model: a torch module) or "llamacpp" (model: GGUFWeights)
    _prompt_cache: dict = field(default_factory=dict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def template_head(self) -> list[int]:
        """The ids every templated prompt of this model starts with (the chat template's head: Qwen's system
        message, for one), found as what two prompts that differ from their first character share."""
        a, b = self.prompt_ids("x"), self.prompt_ids("7 y")
        return a[: common_prefix(a, b)]

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


class Source(StrEnum):
    """Where a loaded model's weights came from; the value is what the trace and the app show."""

    EMBEDDED_CACHED = "embedded (cached)"
    HUB_FALLBACK = "hub (package fallback)"
    HUB = "hub"
    LOCAL = "local"
    IN_MEMORY = "in-memory"

    @property
    def from_hub(self) -> bool:
        return self in (Source.HUB, Source.HUB_FALLBACK)


def _where_from(spec: ModelSpec, progress: Progress) -> tuple[str, Source, str | None]:
    """The folder or hub id to load from, its source, and the GGUF file of a folder that holds only a GGUF."""
    if spec.kind == "embedded":
        if missing_packages(spec) and hub_fallback_enabled():
            return spec.location, Source.HUB_FALLBACK, None
        return str(prepare(spec.name, progress)), Source.EMBEDDED_CACHED, None
    if spec.kind == "local":
        ggufs = sorted(Path(spec.location).glob("*.gguf"))
        gguf_only = ggufs and not (Path(spec.location) / "config.json").exists()
        return spec.location, Source.LOCAL, ggufs[0].name if gguf_only else None
    return spec.location, Source.HUB, None


def _read(spec: ModelSpec, location: str, source: Source, kwargs: dict, model_kwargs: dict, progress: Progress):
    """Tokenizer and model from ``location``; a cached copy that loads badly is rebuilt once."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        if source is Source.EMBEDDED_CACHED:
            tokenizer = load_saved_tokenizer(Path(location))
        else:
            tokenizer = AutoTokenizer.from_pretrained(location, **kwargs)
        model = AutoModelForCausalLM.from_pretrained(location, **model_kwargs, **kwargs)
    except OSError as exc:
        if source is Source.EMBEDDED_CACHED:
            progress(f"{spec.name}: cached copy failed to load ({exc}); rebuilding", None)
            location = str(prepare(spec.name, progress, force=True))
            tokenizer = AutoTokenizer.from_pretrained(location, **kwargs)
            model = AutoModelForCausalLM.from_pretrained(location, **model_kwargs, **kwargs)
        elif source.from_hub:
            raise ModelLoadError(hub_error_message(spec.name, spec.location, exc)) from exc
        else:
            raise ModelLoadError(f"Could not load the model folder {location!r}: {str(exc)[:300]}") from exc
    except Exception as exc:
        if source.from_hub:  # the hub client's own errors, unwrapped (a network error, a refusal)
            raise ModelLoadError(hub_error_message(spec.name, spec.location, exc)) from exc
        raise ModelLoadError(f"Could not load {spec.name!r}: {type(exc).__name__}: {str(exc)[:300]}") from exc
    return tokenizer, model


def load(
    name: str,
    device: str = "cpu",
    dtype: str = "auto",
    progress: Progress | None = None,
    weights: bool = True,
    runtime: str | None = None,
) -> LoadedModel:
    """Load a model by name (embedded key, hub id, preset or local folder; ``name@runtime`` picks its runtime).

    ``runtime``: ``transformers``, ``llamacpp`` (the GGUF as shipped, :mod:`ensemble.members.llamacpp`) or ``auto``
    (:func:`~ensemble.models.runtimes.pick_runtime`); a ``@runtime`` in the name wins. ``weights=False`` reads the
    tokenizer and the config only and builds the model on the meta device (no memory, no weights read): what a
    coordinator needs when the members compute in their own processes (a 70B member's weights live only on its
    GPU host)."""
    progress = progress or stderr_progress
    base, asked = split_runtime(name)
    spec = resolve(base)
    chosen = pick_runtime(spec, asked or runtime, device)
    return runtime_info(chosen).part("loader")(spec, base, device, dtype, progress, weights, chosen)


def load_transformers(spec: ModelSpec, base: str, device: str, dtype: str, progress: Progress, weights: bool,
                      runtime: str) -> LoadedModel:
    """A model on transformers (any hub id, folder or embedded model's float copy, any device); ``runtime`` is
    the name it is registered under."""
    started = time.perf_counter()
    if weights:
        device_name, device_kwargs = resolve_device(device)
    else:  # the device is the member processes' (a coordinator without a GPU may drive members on GPUs)
        device_name, device_kwargs = ("cpu" if (device or "cpu").strip() == "cpu" else device), {}
    torch_dtype = resolve_dtype(dtype, device_name)
    location, source, gguf_file = _where_from(spec, progress)
    kwargs = {"trust_remote_code": False}
    if gguf_file:
        kwargs["gguf_file"] = gguf_file
    if source.from_hub and not hub_reachable():
        kwargs["local_files_only"] = True  # offline: use the local hub cache or fail at once
    progress(f"{spec.name}: loading from {source}", None)
    if weights:
        tokenizer, model = _read(spec, location, source, kwargs, {"dtype": torch_dtype, **device_kwargs}, progress)
    else:
        tokenizer, model = _read_skeleton(spec, location, source, kwargs, torch_dtype)
    if not getattr(tokenizer, "backend_tokenizer", None):
        raise ModelLoadError(f"Model {spec.name!r} has no fast tokenizer; Ensemble Lens needs one to align tokens.")
    if device_name == "cpu" and weights:
        model.to("cpu")
    loaded = wrap(spec.name, model, tokenizer, template=spec.template, source=source)
    loaded.spec = spec
    loaded.load_args = (base, device, dtype, runtime)
    loaded.runtime = loaded.info["runtime"] = runtime
    loaded.has_weights = weights
    loaded.load_seconds = time.perf_counter() - started
    progress(f"{spec.name}: ready in {loaded.load_seconds:.1f} s", 1.0)
    return loaded


def _read_skeleton(spec: ModelSpec, location: str, source: Source, kwargs: dict, torch_dtype):
    """Tokenizer, and the model built from its config on the meta device (shapes, no weights)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    try:
        tokenizer = load_saved_tokenizer(Path(location)) if source is Source.EMBEDDED_CACHED else AutoTokenizer.from_pretrained(location, **kwargs)
        config = AutoConfig.from_pretrained(location, **kwargs)
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config, dtype=torch_dtype)
        with contextlib.suppress(OSError):  # no generation_config.json: the config's own end of sequence stands
            model.generation_config = GenerationConfig.from_pretrained(location, **kwargs)
    except Exception as exc:  # any folder may be named: one message, never a traceback
        if source.from_hub:
            raise ModelLoadError(hub_error_message(spec.name, spec.location, exc)) from exc
        detail = (str(exc).splitlines() or [type(exc).__name__])[0][:300]
        raise ModelLoadError(f"Could not read the tokenizer and config of {spec.name!r}: {detail}") from exc
    return tokenizer, model


def wrap(name: str, model, tokenizer, template: str = "auto", source: str = Source.IN_MEMORY) -> LoadedModel:
    """Use an already built model (e.g. a tiny model from a config in tests) as an ensemble member."""
    model.eval()
    vocab = model.get_output_embeddings().weight.shape[0]
    keys = KeyTable(tokenizer, vocab, _eos_ids(model, tokenizer))
    kind = _template_kind(tokenizer, template)
    dtype = next(model.parameters()).dtype
    return LoadedModel(
        name=name,
        spec=ModelSpec(name=name, kind="local", location=source, description=f"{type(model).__name__} ({source})"),
        model=model,
        tokenizer=tokenizer,
        keys=keys,
        template=_template(kind),
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
            "runtime": "transformers",
        },
    )


def _template_kind(tokenizer, template: str) -> str:
    """``chat`` when the tokenizer has a chat template and the model's spec does not ask for the plain one."""
    return "chat" if template != "plain" and getattr(tokenizer, "chat_template", None) else "plain"


def _template(kind: str) -> PromptTemplate:
    return PromptTemplate(kind, PLAIN_STOPS if kind == "plain" else ())


def _gguf_source(spec: ModelSpec, progress: Progress) -> tuple[Path, object, Source, Path]:
    """The GGUF file, the transformers tokenizer of the same GGUF, the source and the folder of its files."""
    from transformers import AutoTokenizer

    if spec.kind == "embedded":
        folder = prepare_gguf(spec.name, progress)
        return folder / "model.gguf", load_saved_tokenizer(folder), Source.EMBEDDED_CACHED, folder
    if spec.kind == "local":
        folder = Path(spec.location)
        ggufs = sorted(folder.glob("*.gguf"))
        if not ggufs:
            raise ModelLoadError(
                f"The llama.cpp runtime needs a .gguf file; the folder {spec.location!r} has none (use --runtime transformers)."
            )
        try:
            if (folder / "tokenizer.json").exists():
                tokenizer = AutoTokenizer.from_pretrained(str(folder), trust_remote_code=False)
            else:
                tokenizer = AutoTokenizer.from_pretrained(str(folder), gguf_file=ggufs[0].name, trust_remote_code=False)
        except Exception as exc:
            detail = (str(exc).splitlines() or [type(exc).__name__])[0][:300]
            raise ModelLoadError(f"Could not read the tokenizer of {spec.name!r} for llama.cpp: {detail}") from exc
        return ggufs[0], tokenizer, Source.LOCAL, folder
    raise ModelLoadError(
        f"The llama.cpp runtime computes GGUF files: an embedded model or a local folder holding a .gguf. "
        f"{spec.location!r} is a hub model: use --runtime transformers for it."
    )


def load_llamacpp(spec: ModelSpec, base: str, device: str, dtype: str, progress: Progress, weights: bool,
                  runtime: str) -> LoadedModel:
    """A GGUF on llama.cpp (:mod:`.gguf`; computed by :mod:`ensemble.members.llamacpp`): no de-quantization; tokenizer, key table and template from
    the transformers tokenizer of the same GGUF, whose ids are checked against llama.cpp's at load."""
    from .gguf import GGUFWeights, check_tokenizer, lib

    if not runtime_info(runtime).runs_on(device):
        raise ModelLoadError(f"The llama.cpp runtime here computes on the CPU; for device {device!r} use --runtime transformers.")
    started = time.perf_counter()
    lib()  # a clear message now when llama-cpp-python is missing, before any file is prepared
    gguf, tokenizer, source, folder = _gguf_source(spec, progress)
    if not getattr(tokenizer, "backend_tokenizer", None):
        raise ModelLoadError(f"Model {spec.name!r} has no fast tokenizer; Ensemble Lens needs one to align tokens.")
    progress(f"{spec.name}: loading {gguf.name} on llama.cpp", None)
    model = GGUFWeights(gguf, spec.name)
    check_tokenizer(model, tokenizer, spec.name)
    eos = ({tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set()) | _generation_eos(str(folder))
    keys = KeyTable(tokenizer, model.n_vocab, eos)
    kind = _template_kind(tokenizer, spec.template)
    quant = gguf.stem.rsplit(".", 1)[-1] if "." in gguf.stem else "GGUF"
    loaded = LoadedModel(
        name=spec.name,
        spec=spec,
        model=model,
        tokenizer=tokenizer,
        keys=keys,
        template=_template(kind),
        device="cpu",
        load_seconds=0.0,
        source=source,
        context_limit=model.context_limit,
        info={
            "architecture": f"llama.cpp ({gguf.name})",
            "parameters": model.n_params,
            "vocab": model.n_vocab,
            "tokenizer": keys.scheme,
            "template": kind,
            "dtype": f"GGUF {quant}" if spec.kind != "embedded" else f"GGUF as shipped ({spec.embedded.gguf_mb} MB)",
            "runtime": runtime,
        },
        load_args=(spec.name if spec.kind == "embedded" else spec.location, device, dtype, runtime),
        has_weights=weights,
        runtime=runtime,
    )
    loaded.load_seconds = time.perf_counter() - started
    progress(f"{spec.name}: ready on llama.cpp in {loaded.load_seconds:.1f} s", 1.0)
    return loaded


def load_tokenizer(name: str, progress: Progress | None = None):
    """Only the tokenizer and key table of a model (fast: no weights are read)."""
    from transformers import AutoConfig, AutoTokenizer

    spec = resolve(name)
    if spec.tokenizer:  # a member on a server: the tokenizer this process keeps for it
        return spec.name, load_tokenizer(spec.tokenizer, progress)[1]
    location = spec.location
    from_hub = spec.kind == "hub" or (spec.kind == "embedded" and bool(missing_packages(spec)) and hub_fallback_enabled())
    if spec.kind == "embedded" and not from_hub:
        # the float copy's tokenizer when it is prepared, else the GGUF folder's (the same files, and no
        # de-quantization for a llama.cpp user)
        location = str(prepare(spec.name, progress) if is_cached(spec.name) else prepare_gguf(spec.name, progress))
    # an unreachable hub: the local hub cache at once, not the hub client's retries (about a minute)
    offline = from_hub and not hub_reachable()
    try:
        tokenizer = AutoTokenizer.from_pretrained(location, trust_remote_code=False, local_files_only=offline)
        config = AutoConfig.from_pretrained(location, trust_remote_code=False, local_files_only=offline)
    except Exception as exc:  # any folder may be named (a device, /proc): one message, never a traceback
        if from_hub:
            raise ModelLoadError(hub_error_message(spec.name, spec.location, exc)) from exc
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
