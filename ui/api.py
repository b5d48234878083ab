"""The app's API for scripts and its MCP tools: ``/run_ensemble``, ``/fork``, ``/explain_token``, ``/tokenize``.

Each takes and returns JSON and refuses bad input with a ``gr.Error`` that says what to fix. The docstrings are
the tools' descriptions (Gradio reads them for the API page and the MCP server): keep them in the users' terms.
"""

from __future__ import annotations

import gradio as gr

import visual
from ensemble.errors import EnsembleError, MemberDied
from ensemble.fork import complete_fork, fork_request
from ensemble.members.home import homed
from ensemble.methods import EnsembleRun
from ensemble.models import DEFAULT_ENSEMBLE, DEFAULT_MODELS
from ensemble.preflight import preflight
from ensemble.settings import Settings
from ensemble.trace.read import read_trace
from ui import config
from ui.api_args import settings_object, token_number
from ui.tokenizers import comparison


def build_settings(values: dict) -> Settings:
    """Settings from the API; 'auto' and empty values mean the method's default."""
    data = {k: v for k, v in (values or {}).items() if v not in (None, "", "auto")}
    return Settings.from_dict(data)


def run_ensemble(prompt: str, method: str = "safe", models: str = ",".join(DEFAULT_ENSEMBLE), settings: dict | None = None) -> dict:
    """Run a method on a prompt and return the full trace as JSON.

    Args:
        prompt: the user prompt.
        method: single | unite | gac | safe | specem.
        models: comma-separated model names (embedded: qwen, smollm2, gemma3; or hub ids / local folders).
        settings: engine options as a JSON object, e.g. {"max_new_tokens": 64, "lookahead": 5, "fusion": "gac"}.
    """
    job = None
    try:
        values = settings_object(settings)
        checked = preflight(prompt, method, models, lambda _members: build_settings(values), offer=config.offered)
        models = config.load_models(checked.names)
        job = EnsembleRun.from_request(checked, models, backend=config.backend_for(models))
        for _ in homed(job.events()):
            pass
    except MemberDied as exc:  # the trace so far, as the browser keeps it: stop_reason "member_failed", error says who
        if job is None:
            raise gr.Error(str(exc)) from exc
        return job.trace.to_dict()
    except (EnsembleError, ValueError) as exc:
        raise gr.Error(str(exc)) from exc
    except Exception as exc:
        raise gr.Error(f"The run failed: {type(exc).__name__}: {exc}") from exc
    return job.trace.to_dict()


def fork(trace: dict, at: int, method: str = "", force: str = "") -> dict:
    """Continue a run's trace from its token ``at`` with ``method`` and compare: {"fork": trace, "comparison": …}.

    Args:
        trace: a trace as JSON (what run_ensemble returns); its models must be ones this app offers.
        at: the token number to re-decide (0 rewrites the whole answer).
        method: drafter (the run's drafter alone; the default) | single | unite | gac | safe | specem; with
            ``force``, the default is the run's own method.
        force: a key (its exact text, e.g. " F") to put at token ``at`` instead of the run's; the method goes on.
    """
    try:
        parent = read_trace(trace)
        at = token_number(at, "at")  # "3" is token #3; the fork's preflight says which tokens a fork may start from
        checked = fork_request(parent, at, method or None, force or None, offer=config.offered)
        models = config.load_models(checked.names)
        forked, comparison = complete_fork(checked, models, parent, homed, backend=config.backend_for(models))
    except (EnsembleError, ValueError, TypeError) as exc:
        raise gr.Error(str(exc)) from exc
    return {"fork": forked.to_dict(), "comparison": comparison.to_dict()}


def explain_token(trace: dict, index: int) -> dict:
    """Why the ensemble chose token ``index`` of a trace, in plain words, with the token's full record.

    Args:
        trace: a trace as JSON (what run_ensemble returns, or a saved trace file's content).
        index: the token's number in the trace (0 = the first token of the answer).

    Returns:
        {"index", "text" (the token's characters), "decision", "explanation" (plain text), "record" (raw JSON)}.
    """
    try:
        parsed = read_trace(trace)  # in a reader thread, with a time limit
        index = token_number(index, "index", len(parsed.tokens))  # "1" is token #1
    except (EnsembleError, ValueError, TypeError) as exc:
        raise gr.Error(str(exc)) from exc
    record = parsed.tokens[index]
    return {"index": index, "text": parsed.text[record.start : record.end], "decision": str(record.decision),
            "explanation": visual.explain_text(parsed, index), "record": visual.inspector_json(parsed, index)}


def tokenize(text: str, models: str = ",".join(DEFAULT_MODELS)) -> dict:
    """Compare how the models' tokenizers cut a text: each model's tokens with spans, the boundaries they share,
    the boundaries each lacks, and the agreement in percent.

    Args:
        text: any text (names, numbers, emoji, CJK and code show the mismatches best).
        models: comma-separated tokenizer names (embedded: qwen, smollm2, gemma3).
    """
    try:
        return comparison(text, models)
    except EnsembleError as exc:
        raise gr.Error(str(exc)) from exc

