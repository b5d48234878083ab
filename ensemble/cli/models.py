"""``python -m ensemble models``: the known models, where each comes from, whether its cache is ready."""

from __future__ import annotations

import argparse
import json

from .. import models
from ..models.cache import model_cache
from ..models.integrity import verify_manifest


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true")
    p.add_argument("--verify", action="store_true", help="full sha256 check of cached files")
    p.set_defaults(func=cmd_models)


def cmd_models(args) -> int:
    rows = []
    for name, spec in models.EMBEDDED.items():
        missing = models.missing_packages(spec)
        folder = model_cache(spec)
        problem = verify_manifest(folder, full=args.verify) if not missing else "packages missing"
        rows.append(
            {
                "name": name,
                "source": "embedded (PyPI: " + ", ".join(d for d, _ in spec.embedded.packages[:2]) + ("…" if len(spec.embedded.packages) > 2 else "") + ")",
                "model": spec.location,
                "license": spec.license,
                "installed": not missing,
                "cached": problem is None,
                "cache": str(folder),
                "status": "ready" if problem is None else problem,
            }
        )
    for name, hub in models.GPU_PRESETS.items():
        rows.append({"name": name, "source": "hub preset (needs network; for a GPU)", "model": hub, "license": "see model card",
                     "installed": None, "cached": None, "cache": "", "status": "downloads on first use"})
    if args.json:
        print(json.dumps({"models": rows, "cache_dir": str(models.cache_dir())}, indent=1))
        return 0
    print(f"cache directory: {models.cache_dir()}  (set ENSEMBLE_LENS_CACHE to move it)")
    for r in rows:
        print(f"  {r['name']:<14} {r['status']:<28} {r['model']:<38} {r['source']}")
    print("Also: any Hugging Face model id (org/name) or the path of a local model folder.")
    return 0
