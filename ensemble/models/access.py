"""Which models a server lets its visitors load.

A visitor of the app or its API may pick only names the server offers: the embedded models, the presets it
shows, and hub ids the operator lists in ``ENSEMBLE_LENS_ALLOW_MODELS`` (comma-separated). Paths and any other
hub id are accepted only when the operator opts in with ``ENSEMBLE_LENS_ALLOW_PATHS=1`` (for local use): a
path would let a visitor load any folder of the server as a model and, through the error messages, learn
which folders exist. Every refused name gets the same message, whether or not a folder of that name exists.
The command line and the library are local use and accept paths and hub ids as before.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from ..errors import InputError, UnknownModelError, name_list
from .catalogue import resolve
from .runtimes import check_runtime, runtime_info, split_runtime

ALLOW_PATHS = "ENSEMBLE_LENS_ALLOW_PATHS"
ALLOW_MODELS = "ENSEMBLE_LENS_ALLOW_MODELS"


def paths_allowed() -> bool:
    return os.environ.get(ALLOW_PATHS) == "1"


def allowed_ids() -> list[str]:
    """Hub ids the operator added to the offer (``ENSEMBLE_LENS_ALLOW_MODELS``)."""
    return [n.strip() for n in os.environ.get(ALLOW_MODELS, "").split(",") if n.strip()]


def offered(shown: Iterable[str]) -> list[str]:
    """Every name a visitor may use: the names the app shows plus the operator's allowed ids."""
    out = list(dict.fromkeys([*shown, *allowed_ids()]))
    return out


def check_offered(name: str, shown: Iterable[str]) -> str:
    """Return ``name`` (stripped) when the server offers it, else raise one message that reveals nothing about
    the server's file system."""
    name = (name or "").strip() if isinstance(name, str) else ""
    names = offered(shown)
    if name in names:
        return name
    if paths_allowed():
        resolve(name)  # any hub id or folder, as on the command line
        return name
    shown_name = name if len(name) <= 40 else name[:39] + "…"
    raise UnknownModelError(
        f"Unknown model {shown_name!r}. This server offers: {name_list(names)}. "
        f"(Paths and other hub ids need the server to be started with {ALLOW_PATHS}=1.)"
    )


def offered_members(names, shown: Iterable[str], runtime: str | None, server_runtime: str, runtimes: Iterable[str]) -> list[str]:
    """A run's model names from the app or its API (a list, or one comma-separated string), each offered by the
    server (:func:`check_offered`). ``name@runtime`` keeps its own runtime; the others get ``runtime`` when the
    visitor chose one other than the server's own (``server_runtime``: the pool's setting then applies), if this
    server can run it (``runtimes``)."""
    if isinstance(names, str):
        names = [n.strip() for n in names.split(",")]
    if not isinstance(names, list | tuple):
        raise InputError("models must be a comma-separated list of model names.")
    out = [n for n in names if isinstance(n, str) and n.strip()]
    if not out:
        raise InputError("Choose at least one model.")
    runtime = check_runtime(runtime) if runtime else None
    if runtime is not None and runtime not in runtimes:
        info = runtime_info(runtime)  # what a server leaves out is a runtime whose optional package is missing
        why = f"{info.install} is not installed here" if info.can_be_missing else "this server does not offer it"
        raise InputError(f"This server cannot run models on {runtime}: {why}.")
    chosen = []
    for name in out:
        base, own = split_runtime(name.strip())
        base = check_offered(base, shown)
        use = own or (runtime if runtime not in (None, server_runtime) else None)
        chosen.append(f"{base}@{use}" if use else base)
    return chosen
