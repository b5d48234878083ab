"""Why a model could not come from the Hugging Face Hub, said in the user's terms.

Three causes need three different answers: the hub refused access (401/403: a gated model whose licence the
account has not accepted, or no token), the hub could not be reached and the model is not in the local hub cache,
or the hub has no such model. transformers wraps the hub client's exceptions in ``OSError``; the cause is found in
the exception chain by the hub client's own types (:mod:`huggingface_hub.errors`).
"""

from __future__ import annotations

import importlib

ACCESS, OFFLINE, MISSING, OTHER = "access", "offline", "missing", "other"

GATED = frozenset({"google/gemma-3-270m", "google/gemma-3-1b-it", "meta-llama/Llama-3.2-1B-Instruct"})
"""Hub ids of the catalogue that are gated: their licence must be accepted on the hub and a token given."""


def _chain(exc: BaseException):
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def classify(exc: BaseException) -> str:
    """``access`` (401/403, gated), ``offline`` (hub unreachable or offline mode, and not in the cache),
    ``missing`` (the hub has no such repository) or ``other``."""
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        LocalEntryNotFoundError,
        OfflineModeIsEnabled,
        RepositoryNotFoundError,
    )

    network: tuple = ()
    for client in ("httpx", "httpx2"):  # the hub client's HTTP library (huggingface_hub 2 uses httpx2)
        try:
            module = importlib.import_module(client)
        except ImportError:
            continue
        network += (module.NetworkError, module.TimeoutException)
    for link in _chain(exc):
        if isinstance(link, GatedRepoError):
            return ACCESS
        if isinstance(link, RepositoryNotFoundError):
            return MISSING
        if isinstance(link, HfHubHTTPError):
            status = getattr(getattr(link, "response", None), "status_code", None)
            if status in (401, 403):
                return ACCESS
        if isinstance(link, (LocalEntryNotFoundError, OfflineModeIsEnabled, ConnectionError, TimeoutError, *network)):
            return OFFLINE
    text = str(exc)
    if "gated repo" in text:
        return ACCESS
    if "couldn't connect" in text or "offline mode" in text.lower():
        return OFFLINE
    return OTHER


def access_help(hub_id: str) -> str:
    """What to do for a gated model, on a Space and elsewhere."""
    return (
        f"Accept its licence at https://huggingface.co/{hub_id} with your Hugging Face account, then give the app a "
        "token of that account: on a Space add it as the secret HF_TOKEN (Settings, Variables and secrets), "
        "elsewhere set HF_TOKEN or run `hf auth login`."
    )


def hub_error_message(name: str, hub_id: str, exc: BaseException) -> str:
    """One message for a model that could not be loaded from the hub (``name`` as the user chose it)."""
    detail = (str(exc).splitlines() or [type(exc).__name__])[0][:200]
    label = repr(name) if name == hub_id else f"{name!r} ({hub_id})"
    cause = classify(exc)
    if cause == ACCESS:
        return f"The Hugging Face Hub refused access to {label}: the model is gated. {access_help(hub_id)}"
    if cause == MISSING:
        return (f"The Hugging Face Hub has no model {hub_id!r} that this token may see (a private model needs HF_TOKEN "
                f"of an account with access). Details: {detail}")
    gated = f" It is gated: {access_help(hub_id)}" if hub_id in GATED else ""
    if cause == OFFLINE:
        return (f"Could not load {label} from the Hugging Face Hub: it is not in the local hub cache and the hub could "
                f"not be reached (offline?).{gated}")
    return f"Could not load {label} from the Hugging Face Hub: {detail}{gated}"
