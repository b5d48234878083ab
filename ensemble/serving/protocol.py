"""The OpenAI-compatible protocol of ``ensemble serve``: a request's JSON to a checked run, a run to the answer's
JSON and its stream chunks, and errors as OpenAI's error object. No HTTP here (:mod:`.routes` has it).

A model id names a method and its members in the syntax of ``evaluate --methods`` (:mod:`ensemble.evaluation.specs`):
``single:qwen``, ``safe-unite@qwen+smollm2``, ``unite@qwen+smollm2+gemma3``, ``safe-gac@qwen=2+gemma3``;
``single@qwen`` is read as ``single:qwen`` and a bare ensemble method (``safe-unite``) runs on the default ensemble.

What the settings map to, and what is refused (docs/serve.md has the table): ``max_tokens`` (chat:
``max_completion_tokens`` too), ``temperature``, ``top_p``, ``seed`` and ``stop`` are the engine's settings of
those names (``stop`` replaces the templates' own stop strings, as ``generate --stop`` does); where absent the
engine's defaults hold (greedy, 128 tokens), not OpenAI's. ``n``/``best_of`` above 1, ``echo``, ``logprobs``,
penalties, ``logit_bias``, ``suffix``, tools and a non-text ``response_format`` are refused; other fields
(``user``, ``metadata``…) are ignored. ``ensemble`` (the client's ``extra_body``) holds any engine setting by its
name, e.g. ``{"lookahead": 3}``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from ..capabilities import SINGLE
from ..errors import EnsembleError, EvaluationError
from ..evaluation.specs import ENSEMBLE_SPECS, MethodSpec, parse_methods
from ..models import DEFAULT_ENSEMBLE
from ..settings import Settings

MAX_STOPS = 4


class ApiError(Exception):
    """An answer in OpenAI's error format: ``{"error": {"message", "type", "param", "code"}}``."""

    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None,
                 kind: str = "invalid_request_error"):
        super().__init__(message)
        self.status, self.message, self.param, self.code, self.kind = status, message, param, code, kind

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}}


@dataclass
class Ask:
    """One request, read and checked: what to run and how to answer."""

    model: str
    spec: MethodSpec
    prompt: str
    settings: Settings
    chat: bool
    stream: bool
    include_usage: bool


def parse_model(model) -> MethodSpec:
    """The method and members a model id names (404 ``model_not_found`` otherwise)."""
    if not isinstance(model, str) or not model.strip():
        raise ApiError(400, "Name a model, e.g. \"single:qwen\" or \"safe-unite@qwen+smollm2\" (GET /v1/models lists them).",
                       "model", "model_not_found")
    text = model.strip()
    if text.lower().startswith(f"{SINGLE}@"):
        text = f"{SINGLE}:{text.split('@', 1)[1]}"
    if "," in text:
        raise ApiError(404, f"The model {model!r} names more than one method; name one, e.g. safe-unite@qwen+smollm2.",
                       "model", "model_not_found")
    try:
        (spec,) = parse_methods(text)
    except EvaluationError as exc:
        shown = model if len(model) <= 60 else model[:57] + "..."
        raise ApiError(404, f"The model {shown!r} does not exist here. A model id is single:NAME, or METHOD@A+B with METHOD "
                       f"one of {', '.join(ENSEMBLE_SPECS)} (GET /v1/models lists them).", "model", "model_not_found") from exc
    return spec


def model_ids(offered: list[str]) -> list[str]:
    """The ids ``/v1/models`` lists: each offered model alone, and every ensemble method on the default ensemble and
    on all offered models (any other ``method@a+b`` of offered models works too)."""
    ids = [f"{SINGLE}:{name}" for name in offered]
    sets = [list(DEFAULT_ENSEMBLE)] if all(n in offered for n in DEFAULT_ENSEMBLE) else []
    if len(offered) > 1 and sorted(offered) != sorted(DEFAULT_ENSEMBLE):
        sets.append(list(offered))
    for label in ENSEMBLE_SPECS:
        ids += [f"{label}@{'+'.join(members)}" for members in sets]
    return ids


def _text(value, name: str) -> str:
    if isinstance(value, list) and len(value) == 1:
        value = value[0]
    if isinstance(value, list):  # chat content parts: only text parts
        if all(isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str) for p in value):
            return "".join(p["text"] for p in value)
        raise ApiError(400, f"{name} must be one text (token ids, images and several prompts are not supported).", name)
    if not isinstance(value, str):
        raise ApiError(400, f"{name} must be a string.", name)
    return value


def chat_prompt(messages) -> str:
    """The one user message a chat request may hold: each member renders it with its own chat template, as
    ``generate`` does (a conversation, a system message or an assistant turn is refused)."""
    if not isinstance(messages, list) or not messages:
        raise ApiError(400, "messages must be a list with one user message.", "messages")
    if len(messages) != 1 or not isinstance(messages[0], dict) or messages[0].get("role") != "user":
        raise ApiError(400, "Send exactly one message, from the user: each member renders it with its own chat template, "
                       "and the ensemble does not take system messages or earlier turns.", "messages")
    return _text(messages[0].get("content"), "messages[0].content")


def _refuse(body: dict) -> None:
    """Fields the ensemble cannot honour: refused, never silently dropped."""
    if body.get("n") not in (None, 1):
        raise ApiError(400, "n must be 1: the ensemble writes one answer per request.", "n")
    if body.get("best_of") not in (None, 1):
        raise ApiError(400, "best_of must be 1.", "best_of")
    if body.get("echo"):
        raise ApiError(400, "echo is not supported: the answer does not repeat the prompt.", "echo")
    if body.get("logprobs") not in (None, False, 0) or body.get("top_logprobs") not in (None, 0):
        raise ApiError(400, "logprobs are not supported: an ensemble's token is decided by several models; its trace "
                       "(trace_url) shows every model's probabilities.", "logprobs")
    for name in ("presence_penalty", "frequency_penalty"):
        if body.get(name) not in (None, 0, 0.0):
            raise ApiError(400, f"{name} is not supported; leave it out or at 0.", name)
    for name in ("logit_bias", "suffix", "tools", "functions", "tool_choice", "function_call"):
        if body.get(name):
            raise ApiError(400, f"{name} is not supported by the ensemble.", name)
    fmt = body.get("response_format")
    if fmt and not (isinstance(fmt, dict) and fmt.get("type") == "text"):
        raise ApiError(400, "response_format must be text.", "response_format")


def _number(body: dict, name: str, kind):
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or (kind is int and not float(value).is_integer()):
        raise ApiError(400, f"{name} must be a {'whole ' if kind is int else ''}number, not {value!r}.", name)
    return kind(value)


def _stops(value) -> list[str] | None:
    if value is None:
        return None
    stops = [value] if isinstance(value, str) else value
    if not isinstance(stops, list) or not all(isinstance(s, str) and s for s in stops) or len(stops) > MAX_STOPS:
        raise ApiError(400, f"stop must be a string or a list of at most {MAX_STOPS} non-empty strings.", "stop")
    return stops or None


def parse_request(body, chat: bool) -> Ask:
    """Read a ``/v1/completions`` (``chat``: ``/v1/chat/completions``) body; the settings are checked by the run's
    preflight, not here."""
    if not isinstance(body, dict):
        raise ApiError(400, "The request body must be a JSON object.")
    spec = parse_model(body.get("model"))
    _refuse(body)
    prompt = chat_prompt(body.get("messages")) if chat else _text(body.get("prompt"), "prompt")
    extra = body.get("ensemble") or {}
    if not isinstance(extra, dict):
        raise ApiError(400, "ensemble must be an object of engine settings, e.g. {\"lookahead\": 3}.", "ensemble")
    values = dict(extra)
    budget = _number(body, "max_completion_tokens", int) if chat and body.get("max_tokens") is None else None
    mapped = {"max_new_tokens": _number(body, "max_tokens", int) if budget is None else budget,
              "temperature": _number(body, "temperature", float), "top_p": _number(body, "top_p", float),
              "seed": _number(body, "seed", int), "stop_strings": _stops(body.get("stop"))}
    values.update({k: v for k, v in mapped.items() if v is not None})
    try:
        settings = spec.settings(Settings.from_dict(values))
    except (EnsembleError, TypeError, ValueError) as exc:
        raise ApiError(400, str(exc)) from exc
    options = body.get("stream_options") or {}
    return Ask(body.get("model").strip(), spec, prompt, settings, chat, bool(body.get("stream")),
               bool(isinstance(options, dict) and options.get("include_usage")))


FINISH = {"budget": "length"}
"""OpenAI's finish_reason of the engine's stop reasons (the others, an end of text or a stop string, are "stop")."""


def finish_reason(stop_reason: str) -> str:
    return FINISH.get(stop_reason, "stop")


def usage(prompt_tokens: int, completion_tokens: int) -> dict:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}


def answer(ask: Ask, trace_id: str, links: dict, text: str, reason: str | None, used: dict | None) -> dict:
    """The whole answer (:func:`chunk` makes a stream's pieces from it)."""
    if ask.chat:
        obj = "chat.completion"
        choice = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": reason, "logprobs": None}
    else:
        obj = "text_completion"
        choice = {"index": 0, "text": text, "finish_reason": reason, "logprobs": None}
    out = {"id": f"{'chatcmpl' if ask.chat else 'cmpl'}-{trace_id}", "object": obj, "created": int(time.time()),
           "model": ask.model, "choices": [choice], **links}
    if used is not None:
        out["usage"] = used
    return out


def chunk(ask: Ask, trace_id: str, links: dict, text: str = "", reason: str | None = None, role: bool = False) -> dict:
    """One stream chunk: new text, or the last one's ``finish_reason`` (chat: the first says the role)."""
    if not ask.chat:
        return answer(ask, trace_id, links, text, reason, None) | {"object": "text_completion"}
    delta = ({"role": "assistant", "content": ""} if role else {}) | ({"content": text} if text else {})
    out = answer(ask, trace_id, links, "", None, None) | {"object": "chat.completion.chunk"}
    out["choices"] = [{"index": 0, "delta": delta, "finish_reason": reason, "logprobs": None}]
    return out
