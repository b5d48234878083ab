"""``python -m ensemble prepare``: assemble and de-quantize the embedded models once."""

from __future__ import annotations

import argparse

from .. import models
from ..errors import SettingsError
from ..models import DEFAULT_MODELS


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("names", nargs="*")
    p.add_argument("--force", action="store_true", help="rebuild even if cached")
    p.set_defaults(func=cmd_prepare)


def cmd_prepare(args) -> int:
    for name in args.names or list(DEFAULT_MODELS):
        if name not in models.EMBEDDED:
            raise SettingsError(f"prepare works on embedded models ({', '.join(models.EMBEDDED)}); got {name!r}.")
        folder = models.prepare(name, force=args.force)
        print(f"{name}: ready in {folder}")
    return 0
