"""The server's configuration and its process-wide singletons, read once from the environment at import.

Every setting of the served app is declared here: the device, the member backend, the runtime, the queue, the
models it offers, and the two singletons every handler shares: the model pool (:data:`POOL`) and the sessions
(:data:`SESSIONS`). Handlers read them as ``config.POOL`` (not ``from ui.config import POOL``) so that a test or a
script may replace one.
"""

from __future__ import annotations

import os

from ensemble.members import backend_from_env, make_backend, warm
from ensemble.members.home import on_home
from ensemble.models import DEFAULT_MODELS, EMBEDDED, GPU_PRESETS, ModelPool
from ensemble.models.access import offered_members
from ensemble.models.runtimes import AUTO, available_runtimes, runtime_from_env
from ui.files import project_file
from ui.sessions import Session, Sessions

try:  # ZeroGPU on Spaces; a no-op decorator everywhere else
    import spaces  # type: ignore

    gpu = spaces.GPU if os.environ.get("SPACES_ZERO_GPU") else (lambda fn: fn)
except ImportError:  # pragma: no cover - depends on the platform
    gpu = lambda fn: fn  # noqa: E731

DEVICE = os.environ.get("ENSEMBLE_LENS_DEVICE", "cpu")
BACKEND_NAME, BACKEND_WHY = backend_from_env(DEVICE)  # ENSEMBLE_LENS_BACKEND=local|ray|auto (auto: local on one machine)
BACKEND = make_backend(BACKEND_NAME, device=DEVICE)  # where members compute; a process backend's pool holds no weights
RUNTIME = runtime_from_env()  # ENSEMBLE_LENS_RUNTIME=auto|transformers|llamacpp (auto: llama.cpp for the embedded models on a CPU)
POOL = ModelPool(device=DEVICE, runtime=RUNTIME, weights=not BACKEND.remote)
RUNTIME_CHOICES = [AUTO, *available_runtimes()]  # a runtime whose optional package is missing is not offered
QUEUE_SIZE = int(os.environ.get("ENSEMBLE_LENS_QUEUE", "16"))
RUN_CONCURRENCY = int(os.environ.get("ENSEMBLE_LENS_CONCURRENCY", "2"))
MCP_SERVER = os.environ.get("ENSEMBLE_LENS_MCP", "1") != "0"  # the API's endpoints as MCP tools for agents
OPENAI_ROUTES = os.environ.get("ENSEMBLE_LENS_OPENAI", "1") != "0"  # /v1: the OpenAI-compatible routes (docs/serve.md)

PRESETS_VISIBLE = DEVICE != "cpu" or os.environ.get("ENSEMBLE_LENS_PRESETS") == "1"
MODEL_CHOICES = list(EMBEDDED) + (list(GPU_PRESETS) if PRESETS_VISIBLE else [])
COMMITTED_RESULTS = project_file("docs/results/gsm8k-summary.csv")  # the Results tab's committed evaluation

SESSIONS = Sessions()


def session(request) -> Session:
    """The state of the browser session of ``request`` (a script without one shares "local")."""
    return SESSIONS.get(getattr(request, "session_hash", None) or "local")


def session_key(request) -> str:
    return getattr(request, "session_hash", None) or "local"


def offered(names, runtime: str | None = None) -> list[str]:
    """A run's model names from the app or its API, each one the server offers, with the visitor's runtime."""
    return offered_members(names, MODEL_CHOICES, runtime, RUNTIME, RUNTIME_CHOICES)


def load_models(names: list[str], progress=None) -> list:
    """The models of ``names`` from the pool (``progress``: Gradio's bar, told what loads)."""
    def report(message: str, fraction: float | None) -> None:
        if progress is not None:
            progress(fraction if fraction is not None else 0.0, desc=message)

    return POOL.get_many(names, report)  # one run's models never evict each other from the pool's budget


def backend_for(models: list):
    """A single model runs in process when its weights are here (a member process would only add a round trip
    per token); on a process backend this process holds no weights, so everything runs there."""
    return BACKEND if len(models) > 1 or not POOL.weights else None


def warm_up() -> None:
    """Load the default models (and start their member processes) before serving, so the first run streams at once."""
    # warmed where the runs compute (ensemble.members.home); what fails, the runs say too, and the app keeps serving
    for problem in on_home(warm, POOL, DEFAULT_MODELS, BACKEND):
        print(f"[app] {problem}", flush=True)
    print(f"[app] member backend: {BACKEND.describe()} ({BACKEND_WHY})", flush=True)
    print(f"[app] runtime: {RUNTIME} (loaded: {', '.join(POOL.loaded()) or 'none'})", flush=True)
