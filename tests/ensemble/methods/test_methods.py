"""SAFE, UniTE, GaC and SpecEM: invariants from the papers, on tiny and embedded models."""

from __future__ import annotations

import pytest
import torch

from ensemble.errors import SettingsError
from ensemble.methods import EnsembleRun, RoundEvent, StatusEvent, TokenEvent, generate
from ensemble.methods.fusion import Fuser, heuristic_sharpen
from ensemble.methods.specem import hedge_rewards, hedge_update, verifier_scores, word_cut
from ensemble.settings import Settings
from ensemble.tokens.key_table import KeyTable

PROMPT = "Sofia went to Plovdiv in 1999. Where did Sofia go, and when? Answer in one sentence that starts with her name."


def _single_text(model, n, prompt=PROMPT):
    return generate([model], prompt, "single", Settings(max_new_tokens=n, stop_strings=[])).text


@pytest.mark.parametrize("method", ["safe", "unite", "gac", "specem"])
@pytest.mark.parametrize("name", ["qwen", "smollm2", "gemma3"])
def test_one_model_equals_greedy(tiny, method, name):
    model = tiny[name]
    expected = _single_text(model, 30)
    trace = generate([model], PROMPT, method, Settings(max_new_tokens=30, stop_strings=[]))
    assert trace.text == expected


@pytest.mark.embedded
@pytest.mark.parametrize("method", ["safe", "unite", "gac", "specem"])
def test_one_embedded_model_equals_greedy(embedded, method):
    model = embedded["smollm2"]
    trace = generate([model], PROMPT, method, Settings(max_new_tokens=24, stop_strings=[]))
    assert trace.text == _single_text(model, 24)


@pytest.mark.parametrize("name", ["qwen", "gemma3"])
def test_identical_copy_gives_the_single_model_and_no_ensembling(tiny, name):
    model = tiny[name]
    expected = _single_text(model, 30)
    safe = generate([model, model], PROMPT, "safe", Settings(max_new_tokens=30, stop_strings=[]))
    assert safe.text == expected
    assert safe.stats.et_ratio == 0.0 and safe.models == [model.name, f"{model.name}#2"]
    for method in ("unite", "specem"):
        assert generate([model, model], PROMPT, method, Settings(max_new_tokens=30, stop_strings=[])).text == expected


@pytest.mark.embedded
def test_embedded_identical_copy_under_safe(embedded):
    model = embedded["qwen"]
    safe = generate([model, model], PROMPT, "safe", Settings(max_new_tokens=20, stop_strings=[]))
    assert safe.text == _single_text(model, 20) and safe.stats.ensemble_steps == 0


@pytest.mark.embedded
def test_sofia_split_blocks_fusion(embedded):
    """SmolLM2 drafts S|of|ia, Gemma 3 holds 'Sofia' whole: the edges inside the name are OOV-like."""
    trace = generate([embedded["smollm2"], embedded["gemma3"]], PROMPT, "safe", Settings(max_new_tokens=12))
    assert trace.text.startswith("Sofia")
    by_start = {t.start: t for t in trace.tokens}
    for start, piece in ((1, "of"), (3, "ia")):
        record = by_start[start]
        assert record.text == piece and record.decision == "oov_blocked"
        assert record.details["blocked_by"] == ["gemma3"] and record.details["boundary"] == start
        assert record.details["splits"]["gemma3"][0][0] == "Sofia"
        assert [s[0] for s in record.details["splits"]["smollm2"][:3]] == ["S", "of", "ia"]
        # what gemma3 wanted there, read where its own token "Sofia" starts (the verification pass's row there)
        assert record.details["verifier_from"] == {"gemma3": 0} and record.details["verifier_tokens"] == {"gemma3": "Sofia"}
        tops = record.details["per_model_top"]
        assert list(tops) == ["smollm2", "gemma3"] and tops["smollm2"] == record.topk
        assert "Sofia" in [k for k, _ in tops["gemma3"]]
    assert by_start[5].decision != "oov_blocked"  # after "Sofia" both tokenizers have an edge


def test_heuristic_sharpening_on_a_hand_built_distribution():
    keys = ["S", "So", "Sofia", " went", "Sof"]
    probs = torch.tensor([0.30, 0.20, 0.10, 0.25, 0.15])
    out = heuristic_sharpen(keys, probs, drafter_keys=["S", "So", " went"], lam=0.1)
    # S gains every other key starting with "S" (0.2 + 0.1 + 0.15); "So" gains "Sofia" and "Sof" (0.25),
    # from the unmodified values (no chaining); " went" has no extensions. Then renormalise.
    raw = torch.tensor([0.30 + 0.45, 0.20 + 0.25, 0.10, 0.25, 0.15])
    torch.testing.assert_close(out, raw / raw.sum())
    assert keys[int(out.argmax())] == "S"
    # A key at or below lambda does not absorb anything.
    same = heuristic_sharpen(keys, probs, drafter_keys=["Sofia"], lam=0.1)
    torch.testing.assert_close(same, probs / probs.sum())


def test_sharpening_runs_only_below_one_half(tokenizers):
    tok = tokenizers["smollm2"]
    table = KeyTable(tok, len(tok), {tok.eos_token_id})
    fuser = Fuser(["a", "b"], [table, table], fusion="unite", sharpen="heuristic")
    confident = torch.full((len(tok),), -20.0)
    confident[table.encode(" went")[0]] = 10.0
    assert not fuser.fuse([confident, confident]).record.sharpened
    spread = torch.zeros(len(tok))
    assert fuser.fuse([spread, spread]).record.sharpened


@pytest.mark.parametrize("fusion", ["unite", "gac"])
def test_fused_distributions_sum_to_one_across_vocabularies(tiny, fusion):
    models = [tiny["qwen"], tiny["smollm2"], tiny["gemma3"]]
    fuser = Fuser([m.name for m in models], [m.keys for m in models], fusion=fusion, sharpen="geometric")
    torch.manual_seed(0)
    fused = fuser.fuse([torch.randn(m.keys.vocab_size) for m in models])
    assert abs(float(fused.probs.sum()) - 1.0) < 1e-4
    assert fused.choice in fused.position


def test_replacement_restarts_drafting_and_caches_stay_exact(tiny):
    """Random tiny models disagree a lot: replacements happen; after every round the drafter spells the
    response and every cache equals a full recompute."""
    models = [tiny["qwen"], tiny["gemma3"], tiny["smollm2"]]
    job = EnsembleRun(models, PROMPT, "safe", Settings(max_new_tokens=40, stop_strings=[], lookahead=4))
    drafter = job.adapters[0]
    replaced = 0
    for event in job.events():
        if not isinstance(event, RoundEvent):
            continue
        replaced += event.record.details["replaced"]
        assert drafter.text == job.run.text
        for adapter in job.adapters:
            if adapter is not drafter:
                adapter.sync(job.run.text)
            full = adapter.model(input_ids=torch.tensor([adapter.all_ids()])).logits[0, -1].float()
            torch.testing.assert_close(adapter.next_logits(), full, atol=1e-4, rtol=0)
    assert replaced > 0
    assert job.trace.stats.draft_discarded > 0
    assert job.trace.stats.decisions.get("ensembled_replaced", 0) == replaced


def test_every_token_methods_fuse_every_step(tiny):
    models = [tiny["qwen"], tiny["gemma3"]]
    for method in ("unite", "gac"):
        trace = generate(models, PROMPT, method, Settings(max_new_tokens=12, stop_strings=[], gac_gate=None))
        assert trace.stats.et_ratio == 1.0
        assert all(t.decision == "fused" and t.fusion is not None for t in trace.tokens)
        assert "".join(trace.text[t.start : t.end] for t in trace.tokens) == trace.text


@pytest.mark.embedded
def test_gac_gate_skips_fusion_when_the_primary_is_sure(embedded):
    models = [embedded["qwen"], embedded["smollm2"]]
    trace = generate(models, PROMPT, "gac", Settings(max_new_tokens=12, gac_gate=0.5))
    gated = [t for t in trace.tokens if t.decision == "gated"]
    assert gated and all(t.details["primary_top"] > 0.5 for t in gated)
    assert all(t.fusion is not None for t in trace.tokens if t.decision == "fused")


@pytest.mark.parametrize(
    ("method", "settings", "message"),
    [
        ("safe", {"lookahead": 0}, "lookahead"),
        ("unite", {"top_k": 10**7}, "top_k"),
        ("safe", {"drafter": "nobody"}, "drafter"),
        ("safe", {"fusion": "median"}, "fusion"),
        ("specem", {"segment_len": 0}, "segment_len"),
        ("specem", {"eta": -0.1}, "eta"),
        ("specem", {"verifiers": []}, "verifiers set is empty"),
        ("specem", {"verifiers": ["ghost"]}, "not loaded"),
        ("safe", {"temperature": float("nan")}, "finite"),
        ("safe", {"max_new_tokens": 0}, "max_new_tokens"),
        ("bogus", {}, "Unknown method"),
    ],
)
def test_bad_settings_are_explained(tiny, method, settings, message):
    with pytest.raises(SettingsError) as err:
        EnsembleRun([tiny["qwen"], tiny["smollm2"]], PROMPT, method, Settings(**settings))
    assert message in str(err.value)


# -- SpecEM -------------------------------------------------------------------------------------------------
def test_word_cut_keeps_whole_words():
    assert word_cut("The answer is 4", [3, 10, 13, 15]) == 13
    assert word_cut("The answer is", [3, 10, 13]) == 10  # "is" may be unfinished ("isn't"): cut before its space
    assert word_cut("Hello, wor", [5, 6, 10]) == 6  # after punctuation
    assert word_cut("Done.", [4, 5]) == 5  # ends in punctuation: kept whole
    assert word_cut("我们去普罗夫", [1, 2, 3, 4, 5, 6]) == 5  # no spaces: every CJK character is a word
    assert word_cut("Supercalifragilistic", [5, 10, 20]) == 20  # one long word: kept whole


def test_hedge_rewards_and_update_on_hand_built_scores():
    names = ["a", "b", "c"]
    scores = [[0.5, 0.3, 0.2], [0.6, 0.1, 0.3], [0.2, 0.7, 0.1]]  # verifier x candidate
    rewards = hedge_rewards(scores, names, names)
    # a: pairs (v=b,k=b),(b,c),(c,b),(c,c) -> wins 0.6>=0.1, 0.6>=0.3, 0.2>=0.7 no, 0.2>=0.1 -> 3/4
    assert rewards["a"] == pytest.approx(3 / 4)
    # b: verifiers a,c; candidates a,c: 0.3>=0.5 no, 0.3>=0.2 yes, 0.7>=0.2 yes, 0.7>=0.1 yes -> 3/4
    assert rewards["b"] == pytest.approx(3 / 4)
    # c: verifiers a,b; candidates a,b: 0.2>=0.5 no, 0.2>=0.3 no, 0.3>=0.6 no, 0.3>=0.1 yes -> 1/4
    assert rewards["c"] == pytest.approx(1 / 4)
    # the floor: a candidate that never wins still gets 1/(K-1)^2
    assert hedge_rewards([[1, 0], [1, 0]], ["x", "y"], ["x", "y"])["y"] == pytest.approx(1.0)
    assert hedge_rewards([[0.9, 0.1, 0.0]] * 3, names, names)["c"] == pytest.approx(1 / 4)
    w = hedge_update({"a": 1 / 3, "b": 1 / 3, "c": 1 / 3}, rewards, eta0=0.5, round_number=2, k=3)
    eta = 0.5 * (1 / 3) ** 0.5 / 2
    raw = {m: torch.tensor(eta * g).exp().item() for m, g in rewards.items()}
    assert w == pytest.approx({m: v / sum(raw.values()) for m, v in raw.items()})
    assert sum(w.values()) == pytest.approx(1.0)


def test_verifier_scoring_modes():
    per_token = [([-1.0, -1.0], [2.0, 4.0]), ([-3.0], [1.0])]
    logprob = verifier_scores(per_token, "logprob")
    expected = torch.softmax(torch.tensor([-1.0, -3.0], dtype=torch.float64), 0).tolist()
    assert logprob == pytest.approx(expected)
    assert verifier_scores(per_token, "logit") == pytest.approx([3.0 / 4.0, 1.0 / 4.0])


@torch.inference_mode()
def _separate_scores(adapter, context, blocks):
    out = []
    base = adapter.prompt_ids + adapter.ids[:context]
    for block in blocks:
        logits = adapter.model(input_ids=torch.tensor([base + block])).logits[0].float()
        logp = torch.log_softmax(logits, -1)
        out.append([float(logp[len(base) - 1 + i, t]) for i, t in enumerate(block)])
    return out


def _inline_check(loaded, text, candidates):
    from ensemble.methods.inline import score_inline
    from ensemble.methods.member import ModelAdapter

    adapter = ModelAdapter(loaded)
    adapter.start(PROMPT)
    adapter.sync(text)
    tokenized = [adapter.continuation_ids(c) for c in candidates]
    context = min(k for k, _ in tokenized)
    blocks = [adapter.ids[context:k] + ids for k, ids in tokenized]
    inline = score_inline(adapter, context, blocks)
    separate = _separate_scores(adapter, context, blocks)
    for (lp, _), ref in zip(inline, separate, strict=True):
        torch.testing.assert_close(torch.tensor(lp), torch.tensor(ref), atol=1e-4, rtol=0)
    # the cache is back to the context and still exact
    full = adapter.model(input_ids=torch.tensor([adapter.all_ids()])).logits[0, -1].float()
    torch.testing.assert_close(adapter.next_logits(), full, atol=1e-4, rtol=0)


@pytest.mark.parametrize("name", ["qwen", "smollm2", "gemma3"])
def test_verify_in_line_equals_separate_scoring(tiny, name):
    # Long enough that Gemma's tiny sliding window (12) is crossed inside the candidates.
    _inline_check(tiny[name], "Sofia went to Plov", ["div in 1999 and then to Varna.", "div.", "ia, and later a very long trip east"])


@pytest.mark.embedded
@pytest.mark.parametrize("name", ["qwen", "smollm2", "gemma3"])
def test_embedded_verify_in_line_equals_separate_scoring(embedded, name):
    _inline_check(embedded[name], "Sofia went to Plov", ["div in 1999.", "div", " and then to Varna"])


def test_safe_shows_its_first_draft_before_the_verifiers_decide(tiny):
    models = [tiny["qwen"], tiny["smollm2"], tiny["gemma3"]]
    job = EnsembleRun(models, PROMPT, "safe", Settings(max_new_tokens=12, stop_strings=[]))
    events = list(job.events())
    status = [e for e in events if isinstance(e, StatusEvent)]
    decided = [i for i, e in enumerate(events) if isinstance(e, TokenEvent | RoundEvent)]
    assert len(status) == 1 and events.index(status[0]) < decided[0]  # before any token or round
    first = job.trace.rounds[0]
    assert status[0].data == {"round": 0, "drafter": "tiny-qwen", "draft": first.candidates[0]["text"],
                              "verifiers": ["tiny-smollm2", "tiny-gemma3"]}
    assert repr(first.candidates[0]["text"][:80]) in status[0].message
    alone = EnsembleRun(models[:1], PROMPT, "safe", Settings(max_new_tokens=4, stop_strings=[]))
    assert not any(isinstance(e, StatusEvent) for e in alone.events())  # no verifiers, nothing to wait for


def test_specem_caches_match_a_full_recompute_after_rounds(tiny):
    models = [tiny["qwen"], tiny["smollm2"], tiny["gemma3"]]
    job = EnsembleRun(models, PROMPT, "specem", Settings(max_new_tokens=36, segment_len=6, stop_strings=[]))
    rounds, drafts = 0, []
    for event in job.events():
        if isinstance(event, StatusEvent):  # each draft is shown as soon as it exists, before the vote
            drafts.append(event.data)
            assert event.data["round"] == rounds and not job.trace.rounds[rounds:]
        if isinstance(event, RoundEvent):
            rounds += 1
            record = event.record
            assert [d["waiting"] for d in drafts] == [["tiny-smollm2", "tiny-gemma3"], ["tiny-gemma3"], []]
            assert drafts[-1]["drafts"] == {c["model"]: c["text"] for c in record.candidates}
            assert drafts[0]["drafts"] == {record.candidates[0]["model"]: record.candidates[0]["text"]}
            drafts = []
            assert len(record.scores) == 3 and all(len(row) == len(record.candidates) for row in record.scores)
            assert sum(record.weights_after.values()) == pytest.approx(1.0, abs=3e-6)  # each weight is rounded to 6 places
            winner = job.adapters[[a.name for a in job.adapters].index(record.winner)]
            assert winner.text == job.run.text
    assert rounds >= 2
    for adapter in job.adapters:
        adapter.sync(job.run.text)
        full = adapter.model(input_ids=torch.tensor([adapter.all_ids()])).logits[0, -1].float()
        torch.testing.assert_close(adapter.next_logits(), full, atol=1e-4, rtol=0)
    assert sum(job.trace.stats.wins.values()) == rounds
    assert all(t.decision == "segment" for t in job.trace.tokens)


def test_specem_without_feedback_keeps_uniform_weights(tiny):
    models = [tiny["qwen"], tiny["smollm2"]]
    trace = generate(models, PROMPT, "specem", Settings(max_new_tokens=16, segment_len=4, eta=0.0, stop_strings=[]))
    for record in trace.rounds:
        assert record.weights_after == pytest.approx({"tiny-qwen": 0.5, "tiny-smollm2": 0.5})


def test_every_method_has_a_runner():
    from ensemble.methods import REGISTRY
    from ensemble.settings import METHODS

    assert set(REGISTRY) == set(METHODS)
