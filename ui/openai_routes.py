"""The app's server also answers as an OpenAI-compatible server: ``/v1/models``, ``/v1/completions``,
``/v1/chat/completions`` and ``/v1/traces/{id}``, the routes of ``python -m ensemble serve``
(:mod:`ensemble.serving.routes`, written once) on the app's own models and backend. Each answer's ``trace_url`` is
this server's ``/?trace=ID``, which replays that trace in the Run tab (:func:`trace_asked`)."""

from __future__ import annotations

from ensemble.serving.store import TraceStore
from ui import config

STORE = TraceStore()
"""The traces of /v1 answers: ``$ENSEMBLE_LENS_TRACES`` or ~/.cache/ensemble-lens/traces, the folder ``ensemble
serve`` writes by default, so the app opens that server's links too."""


def add_to(app) -> bool:
    """Add the /v1 routes to the app's FastAPI instance (Gradio's ``demo.app`` once launched), unless
    ``ENSEMBLE_LENS_OPENAI=0`` turns them off (a public Space that wants only its page and Gradio's API); says whether
    it added them."""
    if not config.OPENAI_ROUTES:
        return False
    from ensemble.serving.routes import Engine, add_routes

    engine = Engine(lambda names: config.load_models(names), lambda names: config.offered(names), config.MODEL_CHOICES,
                    STORE, backend_for=lambda models: config.backend_for(models))
    add_routes(app, engine)
    return True


def trace_asked(request):
    """The stored trace a ``?trace=ID`` link names, or None (no such parameter, an id that is not one, or a trace the
    store no longer keeps)."""
    trace_id = (getattr(request, "query_params", None) or {}).get("trace")
    return STORE.read(trace_id) if trace_id else None
