"""``python -m ensemble prepare``: get the embedded models ready once, for the runtime that will compute them.

transformers needs the de-quantized float copy (assembled GGUF -> float model, about a minute per model the first
time); llama.cpp needs only the GGUF as shipped and its tokenizer (:func:`ensemble.models.cache.prepare_gguf`)."""

from __future__ import annotations

import argparse

from .. import models
from ..errors import SettingsError
from ..models import DEFAULT_MODELS
from ..models.runtimes import RUNTIME_ENV, RUNTIMES, pick_runtime


def add_arguments(p: argparse.ArgumentParser) -> None:
    import os

    p.add_argument("names", nargs="*")
    p.add_argument("--force", action="store_true", help="rebuild even if cached")
    p.add_argument(
        "--runtime",
        choices=(*RUNTIMES, "all"),
        default=os.environ.get(RUNTIME_ENV) or "auto",
        help="prepare for this runtime (auto: the one each model will run on; all: both, as the tests need) "
        f"(default: ${RUNTIME_ENV} or auto)",
    )
    p.set_defaults(func=cmd_prepare)


def cmd_prepare(args) -> int:
    for name in args.names or list(DEFAULT_MODELS):
        if name not in models.EMBEDDED:
            raise SettingsError(f"prepare works on embedded models ({', '.join(models.EMBEDDED)}); got {name!r}.")
        wanted = ["transformers", "llamacpp"] if args.runtime == "all" else [pick_runtime(models.EMBEDDED[name], args.runtime)]
        for runtime in wanted:
            if runtime == "llamacpp":
                folder = models.prepare_gguf(name, force=args.force)
            else:
                folder = models.prepare(name, force=args.force)
            print(f"{name}: ready for {runtime} in {folder}")
    return 0
