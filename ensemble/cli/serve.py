"""``python -m ensemble serve``: the ensemble as an OpenAI-compatible server (``/v1/models``, ``/v1/completions``,
``/v1/chat/completions``; :mod:`ensemble.serving`). Every answer names its trace; the app opens it replayed."""

from __future__ import annotations

import argparse
import os

from ..errors import SettingsError
from ..models import EMBEDDED
from ..models.device import resolve_device
from ..serving.store import MAX_COUNT, MAX_MB, TRACES_ENV, TraceStore
from .options import add_backend_options, add_dtype_option, backend_from_args

APP_URL_ENV = "ENSEMBLE_LENS_APP_URL"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default %(default)s; 0.0.0.0 serves the network)")
    p.add_argument("--port", type=int, default=8000, help="port (default %(default)s)")
    p.add_argument("--models", default=",".join(EMBEDDED),
                   help="the members requests may name (default: %(default)s); /v1/models lists them alone and as ensembles")
    p.add_argument("--traces", default=None, metavar="DIR",
                   help=f"where each answer's trace is kept (default: ${TRACES_ENV} or ~/.cache/ensemble-lens/traces; "
                   "the app reads the same folder to open one)")
    p.add_argument("--max-traces", type=int, default=MAX_COUNT, help="keep at most this many traces (default %(default)s)")
    p.add_argument("--max-traces-mb", type=float, default=MAX_MB, help="and at most this many MB (default %(default)s)")
    p.add_argument("--app-url", default=os.environ.get(APP_URL_ENV) or "http://127.0.0.1:7860/",
                   help=f"the app that opens the traces' links (default: ${APP_URL_ENV} or %(default)s)")
    p.add_argument("--max-waiting", type=int, default=8,
                   help="requests that may wait while one runs (one more gets 429 at once; default %(default)s)")
    p.add_argument("--device", default="cpu", help="cpu | cuda:N | auto")
    add_dtype_option(p)
    add_backend_options(p)
    p.set_defaults(func=cmd_serve)


def build_app(args, pool=None, backend=None):
    """The FastAPI app of ``args`` (``pool``/``backend``: given by tests; else made from the flags)."""
    from fastapi import FastAPI

    from ..models import ModelPool
    from ..models.access import offered_members
    from ..models.runtimes import RUNTIMES
    from ..serving.routes import Engine, add_routes
    from .common import models_arg

    offered = models_arg(args.models)
    if args.max_traces < 1 or args.max_traces_mb <= 0 or args.max_waiting < 0:
        raise SettingsError("--max-traces must be at least 1, --max-traces-mb above 0 and --max-waiting 0 or more.")
    if pool is None:
        resolve_device(args.device)
        backend = backend_from_args(args, members=len(offered), names=offered)
        pool = ModelPool(device=args.device, dtype=args.dtype, runtime=args.runtime, weights=not backend.remote)

    def offer(names):
        return offered_members(names, offered, None, args.runtime, RUNTIMES)

    engine = Engine(pool.get_many, offer, offered, TraceStore(args.traces, args.max_traces, args.max_traces_mb),
                    backend_for=lambda models: backend, app_url=args.app_url,
                    max_waiting=args.max_waiting)
    app = FastAPI(title="Ensemble Lens", docs_url=None, redoc_url=None)
    add_routes(app, engine)
    app.state.engine = engine
    return app


def cmd_serve(args) -> int:
    import uvicorn

    app = build_app(args)
    print(f"[ensemble] serving the OpenAI-compatible API on http://{args.host}:{args.port}/v1 "
          f"(traces open in {args.app_url})", flush=True)
    engine = app.state.engine

    class Server(uvicorn.Server):
        def handle_exit(self, sig, frame) -> None:
            engine.stop_all()  # Ctrl-C or `kill`: a run in flight ends at its next token, so the server goes at once
            super().handle_exit(sig, frame)

    Server(uvicorn.Config(app, host=args.host, port=args.port, log_level="warning")).run()
    return 0
