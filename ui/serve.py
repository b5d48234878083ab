"""The ``ensemble-lens`` command (installed with the package): serve the app, as ``python app.py`` does in a checkout.

The app reads its settings from the environment when it is imported (``ENSEMBLE_LENS_*``, ``GRADIO_SERVER_*``);
the options here set them, then import the app and serve it. ``--help`` imports nothing heavy.
"""

from __future__ import annotations

import argparse
import os
import sys

from ensemble.members.backends import BACKENDS
from ensemble.models.runtimes import RUNTIMES


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="ensemble-lens",
        description="Serve Ensemble Lens, the web app that runs several language models as one ensemble and shows, "
        "token by token, why it did what it did. The command line for runs without the app: python -m ensemble.",
    )
    p.add_argument("--host", default=None, help="address to listen on (default: $GRADIO_SERVER_NAME or 127.0.0.1; "
                   "0.0.0.0 to serve the network)")
    p.add_argument("--port", type=int, default=None, help="port (default: $GRADIO_SERVER_PORT or 7860)")
    p.add_argument("--runtime", choices=RUNTIMES, default=None,
                   help="what computes the embedded models (default: $ENSEMBLE_LENS_RUNTIME or auto)")
    p.add_argument("--backend", choices=BACKENDS, default=None,
                   help="where members compute (default: $ENSEMBLE_LENS_BACKEND or auto)")
    p.add_argument("--device", default=None, help="cpu | cuda:N | auto (default: $ENSEMBLE_LENS_DEVICE or cpu)")
    p.add_argument("--no-warmup", action="store_true", help="serve at once; load the models at the first run")
    return p


def environment(args: argparse.Namespace) -> dict[str, str]:
    """The environment variables the options stand for (only the options given)."""
    pairs = {
        "GRADIO_SERVER_NAME": args.host,
        "GRADIO_SERVER_PORT": None if args.port is None else str(args.port),
        "ENSEMBLE_LENS_RUNTIME": args.runtime,
        "ENSEMBLE_LENS_BACKEND": args.backend,
        "ENSEMBLE_LENS_DEVICE": args.device,
        "ENSEMBLE_LENS_NO_WARMUP": "1" if args.no_warmup else None,
    }
    return {k: v for k, v in pairs.items() if v is not None}


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    os.environ.update(environment(args))
    import app  # builds the app with the settings above

    app.main()
    return 0
