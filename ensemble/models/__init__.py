"""Where models come from and how they load.

- :mod:`.catalogue`: the names (three embedded models, hub presets, any hub id or folder) and what they resolve to.
- :mod:`.cache` and :mod:`.integrity`: the de-quantized copies of the embedded models (and their GGUF folders for
  llama.cpp) and their checks; :mod:`.runtimes`: which runtime computes a model (transformers or llama.cpp).
- :mod:`.loading`: a name to a :class:`LoadedModel`, with its :class:`Source`; :mod:`.templates` and
  :mod:`.device` hold the prompt templates and the device/dtype names it uses.
- :mod:`.pool`: the process-wide :class:`ModelPool` that loads each model once.

Nothing here imports torch or transformers until a model is loaded.
"""

from .cache import is_cached, is_gguf_cached, prepare, prepare_gguf
from .catalogue import (
    DEFAULT_ENSEMBLE,
    DEFAULT_MODELS,
    EMBEDDED,
    GPU_PRESETS,
    EmbeddedSource,
    ModelSpec,
    Progress,
    cache_dir,
    missing_packages,
    quiet_progress,
    resolve,
)
from .loading import LoadedModel, Source, load, load_saved_tokenizer, load_tokenizer, wrap
from .pool import ModelPool, model_bytes
from .templates import PLAIN_STOPS, PLAIN_TEMPLATE, PromptTemplate

__all__ = [
    "DEFAULT_ENSEMBLE",
    "DEFAULT_MODELS",
    "EMBEDDED",
    "GPU_PRESETS",
    "PLAIN_STOPS",
    "PLAIN_TEMPLATE",
    "EmbeddedSource",
    "LoadedModel",
    "ModelPool",
    "ModelSpec",
    "Progress",
    "PromptTemplate",
    "Source",
    "cache_dir",
    "is_cached",
    "is_gguf_cached",
    "load",
    "load_saved_tokenizer",
    "load_tokenizer",
    "missing_packages",
    "model_bytes",
    "prepare",
    "prepare_gguf",
    "quiet_progress",
    "resolve",
    "wrap",
]
