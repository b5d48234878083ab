"""``python -m ensemble models``: the known models, where each comes from, whether its cache is ready."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .. import models
from ..models.cache import model_cache
from ..models.integrity import NOT_PREPARED, verify_manifest
from ..models.runtimes import DEFAULT_RUNTIME, REGISTRY


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true")
    p.add_argument("--verify", action="store_true", help="check every cached file in full (both runtimes' folders); exit 1 when one is damaged")
    p.set_defaults(func=cmd_models)


def runtime_folders(spec) -> dict[str, Path]:
    """Every prepared-folder kind of an embedded model, by the runtime that reads it (as registered)."""
    return {name: runtime.part("folder")(spec) for name, runtime in REGISTRY.items() if runtime.folder is not None}


def cmd_models(args) -> int:
    rows, damaged = [], []
    for name, spec in models.EMBEDDED.items():
        missing = models.missing_packages(spec)
        checks = {}  # runtime -> None (ready) or what is wrong with its folder
        for runtime, folder in runtime_folders(spec).items():
            checks[runtime] = verify_manifest(folder, full=args.verify) if not missing else "packages missing"
            if checks[runtime] not in (None, NOT_PREPARED, "packages missing"):
                damaged.append((name, runtime, f"{name}'s {runtime} folder {folder} {checks[runtime]}"))
        ready = [r for r, problem in checks.items() if problem is None]
        rows.append(
            {
                "name": name,
                "source": "embedded (PyPI: " + ", ".join(d for d, _ in spec.embedded.packages[:2]) + ("…" if len(spec.embedded.packages) > 2 else "") + ")",
                "model": spec.location,
                "license": spec.license,
                "installed": not missing,
                "cached": checks[DEFAULT_RUNTIME] is None,  # the float copy, which any device reads
                "cache": str(model_cache(spec)),
                "runtimes": {r: {"folder": str(f), "status": checks[r] or "ready"} for r, f in runtime_folders(spec).items()},
                "status": _status(checks, ready),
            }
        )
    for name, hub in models.GPU_PRESETS.items():
        rows.append({"name": name, "source": "hub preset (needs network; for a GPU)", "model": hub, "license": "see model card",
                     "installed": None, "cached": None, "cache": "", "status": "downloads on first use"})
    if args.json:
        print(json.dumps({"models": rows, "cache_dir": str(models.cache_dir()), "damaged": [d[2] for d in damaged]}, indent=1))
    else:
        print(f"cache directory: {models.cache_dir()}  (set ENSEMBLE_LENS_CACHE to move it)")
        for r in rows:
            print(f"  {r['name']:<14} {r['status']:<36} {r['model']:<38} {r['source']}")
        print("Also: any Hugging Face model id (org/name) or the path of a local model folder.")
    for name, runtime, what in damaged:
        print(f"error: {what}; rebuild it with: python -m ensemble prepare {name} --runtime {runtime} --force",
              file=sys.stderr)
    return 1 if damaged else 0


def _status(checks: dict[str, str | None], ready: list[str]) -> str:
    """One phrase for a model's folders: ready for which runtimes, else the first problem found."""
    problems = [f"{r}: {p}" for r, p in checks.items() if p not in (None, NOT_PREPARED)]
    if problems:
        return "; ".join(problems)
    if ready:
        return "ready (" + ", ".join(ready) + ")"
    return "packages missing" if "packages missing" in checks.values() else NOT_PREPARED

