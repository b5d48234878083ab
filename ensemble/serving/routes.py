"""The ``/v1`` routes (OpenAI-compatible) on any FastAPI app: ``ensemble serve``'s own, and the app's server.

Runs are serialised: one request runs the ensemble at a time (on a CPU two runs at once only share its cores);
up to ``max_waiting`` more wait their turn in arrival order, and one more than that is answered at once with
429 (``rate_limit_error``) instead of waiting unbounded. A stream whose client goes away stops its run at the
next token; its partial trace is kept.
"""

from __future__ import annotations

import json
import sys
import threading
import traceback
from collections.abc import Callable, Iterator

import anyio
from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.concurrency import run_in_threadpool

from ..errors import EnsembleError, LlamaCppMissing, MemberDied, MissingPackageError, ModelLoadError, UnknownModelError
from ..members.home import homed
from ..methods import EnsembleRun, TokenEvent
from ..models import DEFAULT_ENSEMBLE
from ..preflight import preflight
from .protocol import ApiError, Ask, answer, chunk, finish_reason, model_ids, parse_request, usage
from .store import TraceStore, new_id

DONE = object()


class Slots:
    """One run at a time, at most ``max_waiting`` waiting (a request past that gets 429 at once)."""

    def __init__(self, max_waiting: int = 8):
        self.max_waiting = max(0, int(max_waiting))
        self._run, self._guard, self._queued = threading.Lock(), threading.Lock(), 0

    def acquire(self) -> None:
        with self._guard:
            if self._queued > self.max_waiting:
                raise ApiError(429, f"The ensemble is busy: one request runs and {self.max_waiting} wait; retry later.",
                               code="busy", kind="rate_limit_error")
            self._queued += 1
        self._run.acquire()

    def release(self) -> None:
        self._run.release()
        with self._guard:
            self._queued -= 1


class Engine:
    """What the routes run on: the models (``load``), which names are offered (``offer``, as the app's), where
    members compute (``backend_for``), the trace store and the app that opens a trace (``app_url``; None: the
    server the request came to, which is the app's own when the routes are on it)."""

    def __init__(self, load: Callable[[list[str]], list], offer: Callable, offered: list[str], store: TraceStore,
                 backend_for: Callable[[list], object] = lambda models: None, app_url: str | None = None,
                 max_waiting: int = 8):
        self.load, self.offer, self.offered, self.store = load, offer, list(offered), store
        self.backend_for, self.app_url, self.slots = backend_for, app_url, Slots(max_waiting)
        self.active: set[threading.Event] = set()  # the cancel flags of the runs in flight
        self.closing = threading.Event()

    def stop_all(self) -> None:
        """The server is stopping: runs in flight end at their next token (their clients get what was decided, the
        trace kept), and requests still waiting are answered 503 instead of starting."""
        self.closing.set()
        for cancel in list(self.active):
            cancel.set()

    def links(self, trace_id: str, base: str) -> dict:
        app = (self.app_url or base).rstrip("/") + "/"
        return {"trace_id": trace_id, "trace_url": f"{app}?trace={trace_id}"}

    def check(self, ask: Ask):
        """The run's preflight: unknown or unoffered members are 404, bad settings 400."""
        try:
            return preflight(ask.prompt, ask.spec.method, ask.spec.model_names(list(DEFAULT_ENSEMBLE)), ask.settings,
                             offer=self.offer)
        except UnknownModelError as exc:
            raise ApiError(404, f"The model {ask.model!r} does not exist here: {exc}", "model", "model_not_found") from exc
        except EnsembleError as exc:
            raise ApiError(400, str(exc)) from exc


class Running:
    """One request's run: :meth:`pieces` yields the answer's new text as it is decided; afterwards ``trace`` is
    the run's trace (saved in the store under ``trace_id``, whole or partial) and ``error`` what stopped it early."""

    def __init__(self, engine: Engine, ask: Ask, request, trace_id: str):
        self.engine, self.ask, self.request, self.trace_id = engine, ask, request, trace_id
        self.cancel, self.trace, self.error, self.prompt_tokens = threading.Event(), None, None, 0

    def pieces(self) -> Iterator[str]:
        self.engine.active.add(self.cancel)
        try:
            yield from self._pieces()
        finally:
            self.engine.active.discard(self.cancel)

    def _pieces(self) -> Iterator[str]:
        models = self.engine.load(self.request.names)
        self.prompt_tokens = len(models[0].prompt_ids(self.request.prompt)) if models else 0
        job = EnsembleRun.from_request(self.request, models, cancel=self.cancel, backend=self.engine.backend_for(models))
        printed = 0
        try:
            for event in homed(job.events()):
                if isinstance(event, TokenEvent) and event.record.end > printed:  # the bytes of one character once
                    piece, printed = event.text[printed : event.record.end], event.record.end
                    yield piece
        except MemberDied as exc:
            self.error = str(exc)
        finally:
            self.trace = job.trace
            self.engine.store.save(job.trace, self.trace_id)
        if len(self.trace.text) > printed:
            yield self.trace.text[printed:]  # what no event covered (not expected: the stream ends as the text does)


def _error(exc: ApiError) -> JSONResponse:
    return JSONResponse(exc.body(), status_code=exc.status)


def _unexpected(exc: Exception) -> ApiError:
    """A bug's answer: its kind only (its message may hold a server path); the traceback goes to the server's log."""
    traceback.print_exception(exc, file=sys.stderr)
    return ApiError(500, f"The run failed ({type(exc).__name__}): a bug in Ensemble Lens; the server's log has the details.",
                    kind="server_error")


def _refused(exc: EnsembleError) -> ApiError:
    """An engine error during a run: a model that cannot load is the server's (503), anything else the request's."""
    if isinstance(exc, ModelLoadError | MissingPackageError | LlamaCppMissing):
        return ApiError(503, str(exc), kind="server_error", code="model_unavailable")
    return ApiError(400, str(exc))


def _sse(data) -> bytes:
    return f"data: {data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)}\n\n".encode()


async def _read(request: Request, chat: bool) -> Ask:
    try:
        body = json.loads(await request.body() or b"null")
    except (ValueError, UnicodeDecodeError) as exc:
        raise ApiError(400, "The request body is not valid JSON.") from exc
    return parse_request(body, chat)


def _headers(links: dict) -> dict:
    return {"X-Ensemble-Trace-Id": links["trace_id"], "X-Ensemble-Trace-Url": links["trace_url"]}


async def _complete(engine: Engine, request: Request, chat: bool) -> Response:
    try:
        ask = await _read(request, chat)
        checked = engine.check(ask)
        await run_in_threadpool(engine.slots.acquire)
    except ApiError as exc:
        return _error(exc)
    if engine.closing.is_set():
        engine.slots.release()
        return _error(ApiError(503, "The server is shutting down; send the request again once it is back.",
                               code="shutting_down", kind="server_error"))
    trace_id = new_id()
    links = engine.links(trace_id, str(request.base_url))
    running = Running(engine, ask, checked, trace_id)
    if ask.stream:
        return StreamingResponse(_stream(engine, running, links), media_type="text/event-stream", headers=_headers(links))
    try:
        text = "".join(await run_in_threadpool(lambda: list(running.pieces())))
    except EnsembleError as exc:
        return _error(_refused(exc))
    except Exception as exc:  # noqa: BLE001 - an OpenAI error, never a traceback
        return _error(_unexpected(exc))
    finally:
        engine.slots.release()
    if running.error:
        return JSONResponse(ApiError(502, running.error, code="member_failed", kind="server_error").body() | links,
                            status_code=502, headers=_headers(links))
    body = answer(ask, trace_id, links, text, finish_reason(running.trace.stats.stop_reason),
                  usage(running.prompt_tokens, len(running.trace.tokens)))
    return JSONResponse(body, headers=_headers(links))


async def _stream(engine: Engine, running: Running, links: dict):
    ask, trace_id, pieces = running.ask, running.trace_id, running.pieces()
    try:
        if ask.chat:
            yield _sse(chunk(ask, trace_id, links, role=True))
        while (piece := await run_in_threadpool(next, pieces, DONE)) is not DONE:
            yield _sse(chunk(ask, trace_id, links, piece))
        if running.error:
            yield _sse(ApiError(502, running.error, code="member_failed", kind="server_error").body() | links)
        else:
            yield _sse(chunk(ask, trace_id, links, reason=finish_reason(running.trace.stats.stop_reason)))
            if ask.include_usage:
                yield _sse(answer(ask, trace_id, links, "", None, usage(running.prompt_tokens, len(running.trace.tokens)))
                           | {"choices": [], "object": chunk(ask, trace_id, links)["object"]})
    except Exception as exc:  # noqa: BLE001 - told in the stream as OpenAI's error event
        yield _sse((_refused(exc) if isinstance(exc, EnsembleError) else _unexpected(exc)).body())
    finally:
        running.cancel.set()  # a client that went away: the run stops at its next token
        with anyio.CancelScope(shield=True):
            await run_in_threadpool(pieces.close)
        engine.slots.release()
    yield _sse("[DONE]")


def add_routes(app: FastAPI, engine: Engine) -> None:
    """``GET /v1/models``, ``POST /v1/completions``, ``POST /v1/chat/completions`` and ``GET /v1/traces/{id}`` (a
    stored trace's JSON) on ``app``."""
    router = APIRouter()

    @router.get("/v1/models")
    async def models() -> JSONResponse:
        data = [{"id": i, "object": "model", "created": 0, "owned_by": "ensemble-lens"} for i in model_ids(engine.offered)]
        return JSONResponse({"object": "list", "data": data})

    @router.post("/v1/completions")
    async def completions(request: Request) -> Response:
        return await _complete(engine, request, chat=False)

    @router.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        return await _complete(engine, request, chat=True)

    @router.get("/v1/traces/{trace_id}")
    async def trace(trace_id: str) -> Response:
        path = engine.store.path(trace_id)
        if path is None or not path.is_file():
            return _error(ApiError(404, "No trace has this id here (the store keeps the newest ones only).", code="not_found"))
        return Response(path.read_bytes(), media_type="application/json")

    app.include_router(router)
