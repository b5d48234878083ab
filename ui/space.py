"""What the app does differently where it is served: the defaults it shows, the first view's label, and Gradio's
Spaces hot reload.

On a Hugging Face Space the embedded models come from their hub ids, and one of them (gemma3) is gated: without
its licence accepted and ``HF_TOKEN`` set the server still serves the others, so the forms must not open on a
model that cannot load.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable, Iterable, Mapping

from ensemble.capabilities import capabilities
from ensemble.models import resolve
from ensemble.models.runtimes import pick_runtime, runtime_label, split_runtime


def usable(names: Iterable[str], unavailable: Mapping[str, str]) -> list[str]:
    """``names`` without the models this server could not load; all of them when none would be left."""
    names = list(names)
    kept = [n for n in names if split_runtime(n)[0] not in unavailable]
    return kept or names


def runtimes_here(models: Iterable[str], runtime: str, device: str) -> list[str]:
    """The runtimes a run of these models would use on this server (what the Run button will do)."""
    out = []
    for name in models:
        base, own = split_runtime(name)
        try:
            out.append(pick_runtime(resolve(base), own or runtime, device))
        except Exception:  # noqa: BLE001 - a label: a name this server cannot resolve says nothing about runtimes
            continue
    return sorted(set(out))


def first_view_status(method: str, models: list[str], recorded: str, runtime: str, device: str,
                      unavailable: Mapping[str, str]) -> str:
    """The first view's label: a recording, and the runtime a live run here uses (not the one it was recorded
    with: a Space without llama.cpp runs transformers); the models this server could not load, and why."""
    here = [runtime_label(r) for r in runtimes_here(models, runtime, device)] or [runtime_label(runtime)]
    caps = capabilities(method)
    name = caps.label if caps else method
    text = (f"A recorded run, not a live one: {name} on {', '.join(models)}, recorded {recorded[:10]}. Click any token "
            f"to see why; press Run to run it live here (on the {' and '.join(here)} "
            f"runtime{'s' if len(here) > 1 else ''}).")
    for name, why in unavailable.items():
        text += f" Not available on this server: {name}. {why}"
    return text


def quiet_spaces_reloader(gradio_http_server, warn: Callable[[str], None] = print) -> bool:
    """Leave Gradio's Spaces hot reload off where the ``spaces`` package is missing.

    With ``SYSTEM=spaces`` (set on every Space) Gradio's ``launch`` starts a watcher thread for Spaces dev-mode hot
    reload, which needs the ``spaces`` package; without it the thread dies with a traceback in the log. A Space
    built by the hub has ``spaces``; an image built from ``requirements.txt`` alone (a Docker Space, the CI's
    Space run) does not, and has nothing to reload. Returns True when the watcher was turned off."""
    if os.environ.get("SYSTEM") != "spaces" or importlib.util.find_spec("spaces") is not None:
        return False
    if not hasattr(gradio_http_server, "watchfn_spaces"):  # another Gradio: nothing to turn off
        return False
    gradio_http_server.watchfn_spaces = lambda reloader: None
    warn("[app] Spaces hot reload off: the `spaces` package is not installed")
    return True
