"""A run's preflight, in one place: what every front end checks before it loads a model.

The app (its Run and Compare tabs, its API and MCP tools, its forks), ``python -m ensemble generate`` and
``fork``, and ``evaluate`` all start a run the same way: clean the prompt, read the members' names (``qwen@llamacpp``
is the member ``qwen`` on llama.cpp), validate the settings for the method on those members, check that each name
is a model, and only then load. :func:`preflight` does those steps and returns a :class:`RunRequest`, which
:meth:`ensemble.methods.EnsembleRun.from_request` starts once its models are loaded. Bad input fails in
milliseconds, before anything loads.

The engine checks its inputs again (:func:`check_run`, the same function) for library callers that build an
``EnsembleRun`` directly; after loading it also knows the vocabularies, so ``top_k`` is checked against them there.
Torch-free: nothing here touches a model.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from .errors import InputError
from .models.catalogue import resolve
from .models.runtimes import split_runtime
from .settings import Settings
from .tokens.key_table import MAX_PROMPT_CHARS, replace_lone_surrogates
from .trace import unique_labels


def clean_prompt(prompt) -> tuple[str, list[str]]:
    """Validate a prompt; return it (lone surrogates replaced) and any warnings."""
    if not isinstance(prompt, str):
        raise InputError("The prompt must be text.")
    if len(prompt) > MAX_PROMPT_CHARS:
        raise InputError(f"The prompt has {len(prompt):,} characters; the limit is {MAX_PROMPT_CHARS:,}.")
    prompt, replaced = replace_lone_surrogates(prompt)
    warnings = ["The prompt held invalid characters (lone surrogates); they were replaced by '?'."] if replaced else []
    if not prompt.strip():
        raise InputError("The prompt is empty: type a question or pick an example.")
    return prompt, warnings


def check_run(prompt, method: str, members: list[str], settings: Settings,
              vocab_sizes: dict[str, int] | None = None) -> tuple[str, list[str]]:
    """The checks every run passes: the prompt cleaned (:func:`clean_prompt`), the settings validated for ``method``
    on ``members`` (the run's names, without ``@runtime``; with ``vocab_sizes`` once the models are loaded).
    Returns the clean prompt and its warnings."""
    prompt, warnings = clean_prompt(prompt)
    settings.validate(method, members, vocab_sizes)
    return prompt, warnings


@dataclass
class RunRequest:
    """A run that passed its preflight, ready to load and start.

    Attributes:
        prompt: the prompt as given (the run cleans it again and keeps its warnings in the trace); None for an
            evaluation, whose prompts come from its questions.
        method: the engine's method.
        names: the models to load, as the pool takes them (``qwen@llamacpp``).
        members: the run's names for them (``qwen``; ``qwen#2`` for a fork's second copy).
        settings: the validated settings.
        warnings: what cleaning the prompt found (the run's trace keeps the same).
        fork, kept, force: a fork's record, kept text and forced key (:mod:`ensemble.fork`).
    """

    prompt: str | None
    method: str
    names: list[str]
    members: list[str]
    settings: Settings
    warnings: list[str] = field(default_factory=list)
    fork: dict | None = None
    kept: str = ""
    force: str = ""


def preflight(prompt, method: str, names: Sequence[str] | str, settings: Settings | Callable[[list[str]], Settings] | None = None,
              *, offer: Callable[[Sequence[str] | str], list[str]] | None = None, resolve_names: bool = True,
              copies: bool = False, fork: dict | None = None, kept: str = "", force: str = "") -> RunRequest:
    """Check a run before anything loads, in this order: the prompt (None: none yet), the names (``offer``: the
    app's check that the server offers them, which also adds a chosen runtime), the settings for ``method`` on the
    members, then (without ``offer``, unless ``resolve_names`` is False) that each name is a model.

    Args:
        settings: the settings, or a function of the members' names that builds them (the app's drafter box
            names a member only when it is one).
        copies: a model may be listed twice (a fork of a run on two copies names the second ``qwen#2``).
        fork, kept, force: carried to the run (:func:`ensemble.fork.fork_request`).
    """
    warnings = clean_prompt(prompt)[1] if prompt is not None else []
    names = list(offer(names) if offer is not None else names)
    members = [split_runtime(n)[0] for n in names]  # a run names its members without "@runtime"
    if copies:
        members = unique_labels(members)
    if callable(settings):
        settings = settings(members)
    settings = settings or Settings()
    settings.validate(method, members)
    if offer is None and resolve_names:
        for name in dict.fromkeys(split_runtime(n)[0] for n in names):
            resolve(name)
    return RunRequest(prompt, method, names, members, settings, warnings, fork, kept, force)
