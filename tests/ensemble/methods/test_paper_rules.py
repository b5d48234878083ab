"""The rules of SAFE, GaC and UniTE as their papers define them (issue 14), each on a hand-built or real case."""

from __future__ import annotations

import math

import pytest
import torch

from ensemble.errors import SettingsError
from ensemble.methods import EnsembleRun, RoundEvent, generate
from ensemble.methods.fusion import Fuser
from ensemble.settings import Settings

PROMPT = "Sofia went to Plovdiv in 1999. Where did Sofia go, and when? Answer in one sentence that starts with her name."
FARMER = "A farmer has 17 sheep. All but 9 run away. Then he buys 4 more. How many sheep does he have now? Think step by step."


def _logits(table, probs: dict[str, float], floor: float = -40.0) -> torch.Tensor:
    """Logits whose softmax puts (about) ``probs`` on the tokens with these exact keys."""
    out = torch.full((table.vocab_size,), floor)
    for key, p in probs.items():
        ids = table.ids_for_key(key)
        assert len(ids) == 1, key
        out[ids[0]] = math.log(p)
    return out


# -- UniTE ----------------------------------------------------------------------------------------------------
def test_unite_fallback_never_counts_one_token_twice(tiny):
    """Qwen has " Cec" but not " Cecilia", whose encoding starts with " Cec": UniTE's rule gives " Cecilia" no
    mass from Qwen, because that token already stands for the key " Cec" (it used to vote twice)."""
    qwen, gemma = tiny["qwen"].keys, tiny["gemma3"].keys
    assert not qwen.ids_for_key(" Cecilia") and qwen.key(qwen.first_token_of(" Cecilia")) == " Cec"
    fuser = Fuser(["qwen", "gemma3"], [qwen, gemma], fusion="unite", top_k=3)
    q = _logits(qwen, {" Cec": 0.6, " Cecil": 0.4})
    g = _logits(gemma, {" Cecilia": 0.5, " Cec": 0.3, " Cecil": 0.2})
    fused = fuser.fuse([q, g])
    assert set(fused.keys) >= {" Cec", " Cecil", " Cecilia"}
    # Qwen over the union: 0.6 / 0.4 / 0 (not 0.6 again); Gemma: 0.3 / 0.2 / 0.5; equal weights.
    assert fused.prob_of(" Cec") == pytest.approx(0.45, abs=1e-4)
    assert fused.prob_of(" Cecil") == pytest.approx(0.30, abs=1e-4)
    assert fused.prob_of(" Cecilia") == pytest.approx(0.25, abs=1e-4)
    assert fused.choice == " Cec"


@pytest.mark.parametrize("key", [".\n", ".\n\n"])
def test_unite_missing_prefix_counts_the_models_own_prefix_key_as_the_released_code_does(tiny, key):
    """SmolLM2 has "." and "\\n" but no ".\\n" or ".\\n\\n"; its encoding of either starts with its token ".",
    which already stands for the union key ".". By default (``once``) the key gets nothing from SmolLM2, so
    SmolLM2's "." counts once. ``prefix`` (the SAFE authors' released code) gives it the score of "." as well:
    that one probability is counted for "." and again for the key, which then wins the step."""
    smol, qwen = tiny["smollm2"].keys, tiny["qwen"].keys
    assert not smol.ids_for_key(key) and smol.key(smol.first_token_of(key)) == "." and qwen.ids_for_key(key)
    s = _logits(smol, {".": 0.6, " The": 0.4})
    q = _logits(qwen, {key: 0.5, ".": 0.3, " The": 0.2})

    def fused(**kw):
        return Fuser(["smollm2", "qwen"], [smol, qwen], fusion="unite", top_k=3, **kw).fuse([s, q])

    once = fused()
    assert once.keys == fused(missing="once").keys and torch.equal(once.probs, fused(missing="once").probs)
    # SmolLM2 over the union: "." 0.6, " The" 0.4, the key 0; Qwen: 0.3 / 0.2 / 0.5; equal weights.
    assert once.prob_of(".") == pytest.approx(0.45, abs=1e-4) and once.prob_of(key) == pytest.approx(0.25, abs=1e-4)
    assert once.choice == "."
    prefix = fused(missing="prefix")
    # SmolLM2: "." and the key both at "."'s logit: 0.6 / 0.4 / 0.6 over 1.6; fused with Qwen's 0.3 / 0.2 / 0.5.
    assert prefix.prob_of(".") == pytest.approx((0.6 / 1.6 + 0.3) / 2, abs=1e-4)
    assert prefix.prob_of(key) == pytest.approx((0.6 / 1.6 + 0.5) / 2, abs=1e-4)
    assert prefix.prob_of(" The") == pytest.approx((0.4 / 1.6 + 0.2) / 2, abs=1e-4)
    assert prefix.choice == key
    with pytest.raises(ValueError, match="missing UniTE key"):
        Fuser(["smollm2"], [smol], fusion="unite", missing="longest")


@pytest.mark.parametrize(("method", "extra"), [("unite", {}), ("safe", {}), ("safe", {"fusion": "gac"})])
def test_unite_missing_reaches_the_fuser_and_the_trace(tiny, monkeypatch, method, extra):
    """The setting is the fuser's rule wherever UniTE fuses (and recorded in the trace, which round-trips it)."""
    import ensemble.methods.every_token as every_token
    import ensemble.methods.safe as safe
    from ensemble.trace import RunTrace

    built = []

    class Recording(Fuser):
        def __init__(self, *args, **kw):
            super().__init__(*args, **kw)
            built.append(self.count_once)

    for module in (every_token, safe):
        monkeypatch.setattr(module, "Fuser", Recording)
    models = [tiny["qwen"], tiny["smollm2"]]
    trace = generate(models, PROMPT, method, Settings(max_new_tokens=4, stop_strings=[], unite_missing="prefix", **extra))
    assert built == [False] and trace.settings["unite_missing"] == "prefix"
    assert RunTrace.from_json(trace.to_json()).settings["unite_missing"] == "prefix"
    built.clear()
    assert generate(models, PROMPT, method, Settings(max_new_tokens=4, stop_strings=[], **extra)).settings["unite_missing"] == "once"
    assert built == [True]
    with pytest.raises(SettingsError, match="Unknown unite_missing 'longest'"):
        EnsembleRun(models, PROMPT, method, Settings(unite_missing="longest"))


# -- sharpening -----------------------------------------------------------------------------------------------
FILLERS = [" apple", " banana", " cherry", " grape", " lemon", " mango", " house", " olive", " peach", " pear", " plum"]


@pytest.mark.parametrize("fusion", ["unite", "gac"])
def test_vocabulary_scope_sharpens_any_key_of_the_drafters_vocabulary(tiny, fusion):
    """§3.3 read literally (``sharpen_scope="vocabulary"``): "the drafter's tokens" are any key of the drafter's
    vocabulary whose fused probability exceeds λ, even one outside the drafter's own top 10. Here the drafter
    spreads its mass over 11 other words; " The" is fused at 0.13 and absorbs " Then", " They" and " There"
    (0.14 + 0.14 + 0.12), so the fused choice is " The" instead of " Then". Guarded (the default), " The" is not
    among the drafter's top 10 and absorbs nothing: " Then" stays."""
    table = tiny["smollm2"].keys
    drafter = _logits(table, {**{w: 0.94 / 11 for w in FILLERS}, " The": 0.06})
    verifier = _logits(table, {" Then": 0.28, " They": 0.28, " There": 0.24, " The": 0.20})
    guarded = Fuser(["drafter", "verifier"], [table, table], fusion=fusion, sharpen="heuristic", lam=0.1)
    assert guarded.fuse([drafter, verifier], drafter=0).choice in (" Then", " They")  # tied: the union's order
    fuser = Fuser(["drafter", "verifier"], [table, table], fusion=fusion, sharpen="heuristic", lam=0.1, scope="vocabulary")
    fused = fuser.fuse([drafter, verifier], drafter=0)
    assert fused.record.sharpened
    assert {k for k, _ in fused.record.before[:2]} == {" Then", " They"}
    assert fused.choice == " The"
    before = dict(fused.record.before)
    expected = before[" The"] + before[" Then"] + before[" They"] + before[" There"]
    total = 1.0 + sum(before[k] for k in (" Then", " They", " There"))  # what was added before renormalising
    others = [k for k in fused.keys if k.startswith(" The") and k not in (" The", " Then", " They", " There")]
    extra = sum(fused.prob_of(k) for k in others) * total  # GaC: tiny mass of " Their", " These", ...
    assert fused.prob_of(" The") * total == pytest.approx(expected + extra, abs=1e-3)


@pytest.mark.parametrize("fusion", ["unite", "gac"])
def test_a_bare_space_never_absorbs_words_and_replaces_the_draft(tiny, fusion):
    """Issue 30, char 193 of a side-by-side run: a bare space went from 0.13 to 0.54 by absorbing " trees" and
    " first" and replaced the drafted word " first" with a space. Guarded (the default, the released code's rule),
    a whitespace-only key absorbs only whitespace: the draft " first" stays. Before issue 30 (``vocabulary``, then
    the only reading) the space won."""
    table = tiny["smollm2"].keys
    drafter = _logits(table, {" first": 0.50, " ": 0.20, " trees": 0.15, " the": 0.15})
    verifier = _logits(table, {" trees": 0.45, " ": 0.20, " first": 0.15, " the": 0.20})
    for scope, choice in ((None, " first"), ("vocabulary", " ")):  # None: the default, guarded
        fuser = Fuser(["drafter", "verifier"], [table, table], fusion=fusion, sharpen="heuristic", lam=0.1, **({"scope": scope} if scope else {}))
        fused = fuser.fuse([drafter, verifier], drafter=0, draft_key=" first")
        before = dict(fused.record.before)
        assert fused.record.sharpened and max(before.values()) < 0.5
        assert before[" first"] == pytest.approx(0.325, abs=1e-3) and before[" "] == pytest.approx(0.20, abs=1e-3)
        assert fused.choice == choice, scope
    # Guarded, a blank key still takes the blank keys that extend it (it carries no word either way).
    drafter = _logits(table, {"\n": 0.30, " So": 0.25, "\n\n": 0.05, " Then": 0.40})
    verifier = _logits(table, {"\n": 0.20, "\n\n": 0.30, " Then": 0.10, " So": 0.40})
    fused = Fuser(["drafter", "verifier"], [table, table], fusion=fusion, sharpen="heuristic", lam=0.1).fuse([drafter, verifier])
    assert dict(fused.record.before)[" So"] > dict(fused.record.before)["\n"] and fused.choice == "\n"


@pytest.mark.parametrize("fusion", ["unite", "gac"])
def test_only_the_drafters_top_ten_keys_absorb(tiny, fusion):
    """Issue 30, char 142: the draft " Then" (fused 0.23) lost to "\\n" (0.23, 0.28 after absorbing "\\n\\n"),
    which the drafter ranked below its top 10. Guarded (the default, the released code's k = 10), only keys among
    the drafter's 10 most probable keys absorb: " Then" stays. Before issue 30 "\\n" won."""
    table = tiny["smollm2"].keys
    fillers = {w: 0.064 - 0.001 * i for i, w in enumerate(FILLERS[:10])}  # ten words the drafter ranks above "\n"
    drafter = _logits(table, {" Then": 0.30, **fillers, "\n\n": 0.04, "\n": 0.025})
    verifier = _logits(table, {"\n": 0.40, "\n\n": 0.20, " Then": 0.25, " So": 0.15})
    for scope, choice in ((None, " Then"), ("vocabulary", "\n")):  # None: the default, guarded
        fuser = Fuser(["drafter", "verifier"], [table, table], fusion=fusion, sharpen="heuristic", lam=0.1, **({"scope": scope} if scope else {}))
        fused = fuser.fuse([drafter, verifier], drafter=0, draft_key=" Then")
        before = dict(fused.record.before)
        assert "\n" not in dict(fused.record.per_model["drafter"])  # outside the drafter's top 10
        assert before[" Then"] > before["\n"] > 0.1 and fused.record.sharpened
        assert fused.choice == choice, scope


def test_after_a_kept_fusion_the_round_walks_on_or_ends_as_alg_1(tiny):
    """Alg. 1 line 10 (i <- j+1) ends the round after any ensembled token; ``after_kept="walk-on"`` (the default)
    goes on deciding the rest of the draft when the fused key is the draft's own. Ending the round discards the
    rest of the draft, and the trace records which was used."""
    models = [tiny["qwen"], tiny["gemma3"], tiny["smollm2"]]
    runs = {}
    for after in ("walk-on", "end-round"):
        trace = generate(models, PROMPT, "safe", Settings(max_new_tokens=40, stop_strings=[], lookahead=4, after_kept=after))
        assert trace.settings["after_kept"] == after
        runs[after] = [r.details for r in trace.rounds]
    walked = [d for d in runs["walk-on"] if "ensembled_kept" in d["decisions"][:-1]]
    assert walked  # the tiny models keep a fused draft token mid-draft, and the round goes on
    ended = [d for d in runs["end-round"] if "ensembled_kept" in d["decisions"]]
    assert ended and all(d["decisions"][-1] == "ensembled_kept" and d["decisions"].count("ensembled_kept") == 1 for d in ended)
    assert any(d["discarded"] > 0 and not d["replaced"] for d in ended)  # the rest of the draft, thrown away


# -- GaC's gate -----------------------------------------------------------------------------------------------
@pytest.mark.embedded
def test_gac_gate_is_on_by_default_and_none_turns_it_off(embedded):
    models = [embedded["qwen"], embedded["smollm2"]]
    assert Settings().gac_gate == 0.5
    trace = generate(models, PROMPT, "gac", Settings(max_new_tokens=12))
    gated = [t for t in trace.tokens if t.decision == "gated"]
    assert gated and all(t.details["primary_top"] >= 0.5 and t.details["gate"] == 0.5 for t in gated)
    assert all(t.details["primary_top"] < 0.5 for t in trace.tokens if t.decision == "fused" and "primary_top" in t.details)
    off = generate(models, PROMPT, "gac", Settings(max_new_tokens=12, gac_gate=None))
    assert off.stats.et_ratio == 1.0 and not any(t.decision == "gated" for t in off.tokens)


@pytest.mark.embedded
def test_safe_with_gac_applies_the_gate_on_the_drafters_top_probability(embedded):
    """Inside SAFE, GaC's gate decides after the stability and consensus checks: where SAFE would fuse and
    the drafter's top probability is at least 0.5, the draft token stays (decision ``gated``)."""
    models = [embedded["qwen"], embedded["smollm2"], embedded["gemma3"]]
    trace = generate(models, FARMER, "safe", Settings(max_new_tokens=48, fusion="gac"))
    gated = [t for t in trace.tokens if t.decision == "gated"]
    assert gated
    for t in gated:
        assert t.fusion is None and t.model == "qwen" and t.details["primary"] == "qwen"
        assert t.details["primary_top"] >= 0.5 and t.details["gate"] == 0.5 and t.details["mean_prob"] <= 0.5
    for t in trace.tokens:
        if t.fusion is not None:
            assert t.details["per_model_top"]["qwen"][0][1] < 0.5  # fused only where the drafter is unsure
    off = generate(models, FARMER, "safe", Settings(max_new_tokens=48, fusion="gac", gac_gate=None))
    assert not any(t.decision == "gated" for t in off.tokens)
    assert off.stats.ensemble_steps > trace.stats.ensemble_steps
    unite = generate(models, FARMER, "safe", Settings(max_new_tokens=24, fusion="unite"))
    assert not any(t.decision == "gated" for t in unite.tokens)  # the gate is GaC's, not UniTE's


# -- weighted consensus ---------------------------------------------------------------------------------------
def test_safe_consensus_mean_uses_the_model_weights(tiny):
    """App. H: the consensus condition is sum(w * P) / sum(w) > 0.5 with the models' weights."""
    models = [tiny["qwen"], tiny["gemma3"], tiny["smollm2"]]
    weights = {"tiny-qwen": 3.0, "tiny-gemma3": 1.0, "tiny-smollm2": 0.5}
    trace = generate(models, PROMPT, "safe", Settings(max_new_tokens=40, stop_strings=[], weights=weights))
    checked = 0
    for t in trace.tokens:
        probs = t.details.get("probs")
        if not probs:
            continue
        mean = sum(weights[m] * p for m, p in probs.items()) / sum(weights[m] for m in probs)
        # Each probability is recorded to 4 places (off by at most 0.5e-4, so their weighted mean is too) and so is
        # mean_prob: the two differ by at most 1e-4; the rest is the float slack of a decimal's binary spelling.
        assert t.details["mean_prob"] == pytest.approx(mean, abs=2e-4)
        if (t.decision != "consensus" or t.condition == "confident") and abs(mean - 0.5) > 1e-4:
            assert (t.condition == "confident") == (mean > 0.5)  # (within 1e-4 of 0.5 the rounded values cannot tell)
        checked += 1
    assert checked >= 5


# -- the drafter after a replacement --------------------------------------------------------------------------
def test_drafter_is_retokenized_after_a_replacement(tiny):
    """Alg. 1 re-tokenizes every model after a replacement, the drafter included: its ids around the new text
    are its own tokenization of that text, not its encoding of the fused key appended alone."""
    models = [tiny["qwen"], tiny["gemma3"], tiny["smollm2"]]
    job = EnsembleRun(models, PROMPT, "safe", Settings(max_new_tokens=60, stop_strings=[], lookahead=4))
    drafter = job.adapters[0]
    replaced = 0
    for event in job.events():
        if not isinstance(event, RoundEvent) or not event.record.details["replaced"]:
            continue
        replaced += 1
        start = job.trace.tokens[-1].start  # the fused key that replaced the draft (in the drafter's text)
        assert job.trace.tokens[-1].decision == "ensembled_replaced"
        edges = [0] + [i + 1 for i, end in drafter.edges_from(0) if end <= start]
        k = max(edges)
        k = max(e for e in edges if e <= max(0, k - 4))
        offset = drafter.token_end(k - 1) if k else 0
        assert drafter.ids[k:] == drafter.keys.encode(drafter.text[offset:]), event.record.index
    assert replaced >= 3


# -- bad settings ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"gac_gate": 0.0}, "gac_gate must be above 0"),
        ({"gac_gate": 1.5}, "gac_gate must be between"),
        ({"weights": {"ghost": 1.0}}, "not one of the selected models"),
        ({"weights": {"tiny-qwen": 0.0, "tiny-smollm2": 0}}, "sum to 0"),
        ({"weights": {"tiny-qwen": -1.0}}, "weight of tiny-qwen"),
    ],
)
def test_bad_gate_and_weights_are_one_line_errors(tiny, settings, message):
    with pytest.raises(SettingsError) as err:
        EnsembleRun([tiny["qwen"], tiny["smollm2"]], PROMPT, "safe", Settings(**settings))
    assert message in str(err.value) and "\n" not in str(err.value)
    assert EnsembleRun([tiny["qwen"], tiny["smollm2"]], PROMPT, "safe", Settings(weights={"tiny-qwen": 0.0}))


# -- SpecEM's sampled drafting --------------------------------------------------------------------------------
def test_specem_sampled_drafts_follow_the_seed(tiny):
    models = [tiny["qwen"], tiny["smollm2"]]

    def run(**kw):
        return generate(models, PROMPT, "specem", Settings(max_new_tokens=16, segment_len=4, stop_strings=[], **kw)).text

    greedy = run()
    sampled = run(sample_drafts=True, seed=3)
    assert sampled == run(sample_drafts=True, seed=3) and sampled != greedy
    assert run(sample_drafts=True, seed=4) != sampled
    with pytest.raises(SettingsError, match="sample_drafts must be true or false"):
        EnsembleRun(models, PROMPT, "specem", Settings(sample_drafts="yes"))
