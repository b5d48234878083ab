"""Hardening against hostile or careless input (issue 18), on tiny models with the real tokenizers: fast,
no embedded weights. Each test fails when the property it names breaks."""

from __future__ import annotations

import threading

import pytest

from ensemble.errors import InputError, SettingsError
from ensemble.methods import EnsembleRun, RoundEvent, StatusEvent, TokenEvent
from ensemble.preflight import clean_prompt
from ensemble.settings import Settings
from ensemble.tokens.key_table import MAX_PROMPT_CHARS
from ensemble.trace.values import MAX_PAIRS

PROMPT = "Sofia went to Plovdiv in 1999. Where did Sofia go?"


class Request:
    session_hash = "hardening-test"


# -- every limit's message states the real limit ---------------------------------------------------------
def test_prompt_limit_message_states_the_real_limit():
    clean_prompt("x" * MAX_PROMPT_CHARS)  # at the limit: accepted
    with pytest.raises(InputError) as err:
        clean_prompt("x" * (MAX_PROMPT_CHARS + 1))
    assert f"the limit is {MAX_PROMPT_CHARS:,}" in str(err.value)


@pytest.mark.parametrize("top_k", [0, 10**9])
def test_top_k_message_names_the_smallest_real_vocabulary(tiny, top_k):
    models = [tiny["qwen"], tiny["smollm2"]]
    with pytest.raises(SettingsError) as err:
        EnsembleRun(models, PROMPT, "unite", Settings(top_k=top_k))
    message = str(err.value)
    assert "49,152" in message and "tiny-smollm2" in message and "1000000 tokens" not in message
    # Before the models load their vocabularies are unknown: the only bound then is what a trace may hold.
    with pytest.raises(SettingsError, match=f"top_k must be between 1 and {MAX_PAIRS}; got {top_k}\\b"):
        Settings(top_k=top_k).validate("unite", ["a", "b"])


def test_unknown_settings_list_at_most_ten_names():
    with pytest.raises(SettingsError) as err:
        Settings.from_dict({f"bogus_{i:05d}": 1 for i in range(10_000)})
    message = str(err.value)
    assert message.count("bogus_") == 10 and "and 9,990 more" in message
    assert len(message) < 1000


# -- prompt cleaning warnings reach the UI ------------------------------------------------------------
def _run_stream(prompt, method="single", models=("smollm2",), tokens=4):
    from ui import running

    values = dict(max_new_tokens=tokens, temperature=0.0, top_p=1.0, seed=0, top_k=10, sharpen="auto", sharpen_lambda=0.1,
                  gac_gate=0.0, lookahead=5, fusion="unite", segment_len=10, eta=0.5, scoring="logprob")
    return list(running.run_stream(prompt, method, list(models), None, values, request=Request(),
                               progress=lambda *a, **k: None))


def test_lone_surrogate_warning_reaches_the_ui_status_and_the_trace(tiny, monkeypatch):
    from ui import config

    monkeypatch.setattr(config, "load_models", lambda names, progress=None: [tiny[n] for n in names])
    views = _run_stream("broken \ud800 half: say ok.")
    final_status = views[-1][1]
    assert "lone surrogates" in final_status and "Done" in final_status
    assert any("lone surrogates" in v[1] for v in views[:-1])  # shown while running, too
    trace = config.SESSIONS.trace(Request.session_hash)
    assert any("surrogate" in w for w in trace.warnings)


# -- SpecEM's Stop: nothing happens after the click --------------------------------------------------
@pytest.mark.parametrize("after_status", [1, 2, 3])
def test_specem_stop_between_drafts_commits_nothing_and_runs_no_pass(tiny, after_status):
    """Stop pressed while a round drafts (after its first, second or last draft): no forward pass runs
    after the flag is set, no token or round is committed after it, and the strip already shows every
    committed token (tokens are released before their round's record)."""
    models = [tiny["qwen"], tiny["smollm2"], tiny["gemma3"]]
    cancel = threading.Event()
    job = EnsembleRun(models, PROMPT, "specem", Settings(max_new_tokens=60, segment_len=4, stop_strings=[]), cancel=cancel)
    streamed, statuses, passes_at_stop, committed_at_stop = 0, 0, None, None
    rounds_seen = 0
    for event in job.events():
        if isinstance(event, TokenEvent):
            streamed += 1
            assert passes_at_stop is None or event.record.index < committed_at_stop
        elif isinstance(event, RoundEvent):
            rounds_seen += 1
            assert passes_at_stop is None, "a round was committed after Stop"
            assert streamed == len(job.trace.tokens)  # its tokens went out before the round record
        elif isinstance(event, StatusEvent) and rounds_seen >= 1 and passes_at_stop is None:
            statuses += 1
            if statuses == after_status:
                cancel.set()
                passes_at_stop = sum(a.stats.passes for a in job.adapters)
                committed_at_stop = len(job.trace.tokens)
    assert job.trace.stats.stop_reason == "cancelled"
    assert sum(job.trace.stats.forward_passes.values()) == passes_at_stop
    assert len(job.trace.tokens) == committed_at_stop == streamed


# -- models: only what the server offers, a pool with a memory budget -----------------------------------
@pytest.mark.parametrize("name", ["~", "/", "/.", "/root/.ssh", "/proc/self", "/no/such/folder", "..", "someone/some-model"])
def test_the_app_refuses_paths_and_hub_ids_with_one_message(name, monkeypatch):
    from ui import config

    monkeypatch.delenv("ENSEMBLE_LENS_ALLOW_PATHS", raising=False)
    with pytest.raises(Exception) as err:
        config.offered(f"smollm2,{name}")
    message = str(err.value)
    assert message.startswith(f"Unknown model {name!r}. This server offers: qwen, smollm2, gemma3")
    # the same words for a folder that exists and one that does not: nothing about the file system leaks
    assert message.replace(repr(name), "X") == str(_refusal("/no/such/folder")).replace(repr("/no/such/folder"), "X")


def _refusal(name):
    from ui import config

    try:
        config.offered(name)
    except Exception as exc:  # noqa: BLE001
        return exc
    raise AssertionError("accepted")


def test_operator_opt_ins_widen_the_offer(monkeypatch, tmp_path):
    from ui import config

    monkeypatch.setenv("ENSEMBLE_LENS_ALLOW_MODELS", "someone/some-model")
    assert config.offered("smollm2,someone/some-model") == ["smollm2", "someone/some-model"]
    with pytest.raises(Exception, match="Unknown model"):
        config.offered(str(tmp_path))
    monkeypatch.setenv("ENSEMBLE_LENS_ALLOW_PATHS", "1")
    with pytest.raises(Exception, match="Unknown model"):  # a folder, but not a model folder
        config.offered(str(tmp_path))
    (tmp_path / "config.json").write_text("{}")
    assert config.offered(str(tmp_path)) == [str(tmp_path)]


def test_the_pool_evicts_the_least_recently_used_model_beyond_its_budget(tiny, monkeypatch):
    from ensemble.models import pool as pool_module

    sizes = {n: pool_module.model_bytes(tiny[n]) for n in ("qwen", "smollm2", "gemma3")}
    loads = []

    def fake_load(name, device, dtype, progress=None, weights=True, runtime=None):
        loads.append(name)
        return tiny[name]

    monkeypatch.setattr(pool_module, "load", fake_load)
    budget = max(sizes["qwen"] + sizes["smollm2"], sizes["smollm2"] + sizes["gemma3"], sizes["qwen"] + sizes["gemma3"])
    pool = pool_module.ModelPool(max_gb=budget / 1e9, runtime="transformers")
    pool.get("qwen"), pool.get("smollm2"), pool.get("gemma3")
    assert pool.loaded() == ["smollm2@transformers", "gemma3@transformers"]  # qwen, the least recently used, went
    pool.get("smollm2")  # now gemma3 is the least recently used
    pool.get("qwen")
    assert pool.loaded() == ["smollm2@transformers", "qwen@transformers"] and loads == ["qwen", "smollm2", "gemma3", "qwen"]
    assert pool.held_bytes() <= budget
    # One ensemble's models never evict each other, even over the budget.
    assert [m.name for m in pool.get_many(["qwen", "smollm2", "gemma3"])] == ["tiny-qwen", "tiny-smollm2", "tiny-gemma3"]
    assert set(pool.loaded()) == {"qwen@transformers", "smollm2@transformers", "gemma3@transformers"}


def test_one_folder_named_two_ways_is_one_pool_entry(tiny, monkeypatch, tmp_path):
    from ensemble.models import pool as pool_module

    monkeypatch.setattr(pool_module, "load", lambda name, device, dtype, progress=None, weights=True, runtime=None: tiny["smollm2"])
    pool = pool_module.ModelPool()
    (tmp_path / "config.json").write_text("{}")  # a model folder (any other folder is an "Unknown model")
    assert pool.get(str(tmp_path)) is pool.get(str(tmp_path) + "/.") is pool.get(str(tmp_path) + "/")
    assert len(pool.loaded()) == 1
