"""Fuzzing with hypothesis over the three real tokenizers: key tables, alignment, fusion.

No exception for any text, and the invariants hold: boundaries sorted and inside the text, shared boundaries
a subset of every model's, keys spelling the text, fused distributions summing to one."""

from __future__ import annotations

import unicodedata

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ensemble.methods.fusion import Fuser
from ensemble.tokens.align import compare

# Any character outside the surrogate block, with extra weight on the troublesome ones.
ANY_CHAR = st.characters(codec="utf-8", exclude_categories=("Cs",))
TRICKY = st.sampled_from(["\x00", "\t", "\r\n", "\u200b", "\u200d", "\u202e", "\ufeff", "e\u0301", "👩\u200d💻", "🇧🇬", "中", "ﬁ", "Ǆ", " ", "  "])
TEXT = st.lists(st.one_of(ANY_CHAR, TRICKY), max_size=60).map("".join)


@settings(max_examples=2000)
@given(text=TEXT)
def test_alignment_never_fails_and_keeps_its_invariants(tables, text):
    result = compare(text, tables)
    shared = set(result["shared_boundaries"])
    for name, info in result["models"].items():
        bounds = info["boundaries"]
        assert bounds == sorted(set(bounds)) and bounds[0] == 0 and bounds[-1] == len(text)
        assert shared <= set(bounds)
        assert all(0 <= t["start"] <= t["end"] <= len(text) for t in info["tokens"])
        ids = tables[name].encode(text)
        spelled = b"".join(tables[name].text_bytes(i) for i in ids)
        expected = (unicodedata.normalize("NFC", text) if name == "qwen" else text).encode("utf-8")
        # A vocabulary without a token for some byte (SmolLM2 has none for 0xF1 to 0xFF, lead bytes of rare
        # A vocabulary without a token for some byte (SmolLM2 lacks 0x04, 0x06, 0x13, 0x14, 0x16, 0x1D, 0xC0,
        # 0xC1, 0xF1, 0xF2 and 0xF5-0xFF) cannot spell characters that need it, and SentencePiece reads a
        # literal U+2581 as its space marker; everything else must come back exactly.
        lossless = all(tables[name].byte_ids[b] is not None for b in expected)
        if lossless and not (tables[name].scheme == "sentencepiece" and "\u2581" in text):
            assert spelled == expected
    assert "".join(s["text"] for s in result["segments"]) == text
    assert 0.0 <= result["agreement"] <= 100.0


@settings(max_examples=300)
@given(
    seed=st.integers(0, 2**31 - 1),
    scale=st.floats(0.1, 30.0),
    fusion=st.sampled_from(["unite", "gac"]),
    sharpen=st.sampled_from(["none", "heuristic", "geometric"]),
    k=st.integers(1, 20),
)
def test_fusion_always_gives_a_distribution(tables, seed, scale, fusion, sharpen, k):
    names = list(tables)
    fuser = Fuser(names, [tables[n] for n in names], fusion=fusion, top_k=k, sharpen=sharpen)
    generator = torch.Generator().manual_seed(seed)
    logits = [torch.randn(tables[n].vocab_size, generator=generator) * scale for n in names]
    fused = fuser.fuse(logits, drafter=seed % len(names))
    assert torch.isfinite(fused.probs).all()
    whole = fusion == "unite" or len(fused.keys) == fuser.union.size  # GaC from summaries lists its candidates only
    assert abs(float(fused.probs.sum()) - 1.0) < 1e-4 if whole else float(fused.probs.sum()) <= 1.0 + 1e-4
    assert float(fused.probs.min()) >= 0.0
    assert fused.choice in fused.position
    record = fused.record
    assert all(0.0 <= p <= 1.0 + 1e-6 for _, p in record.before)
    assert set(record.per_model) == set(names)


@settings(max_examples=500)
@given(keys=st.lists(st.sampled_from(["S", "So", "Sof", "Sofia", " went", "1", "19", "199", "\n", "中"]), min_size=1, max_size=10, unique=True),
       seed=st.integers(0, 10_000))
def test_heuristic_sharpening_keeps_a_distribution(keys, seed):
    from ensemble.methods.fusion import heuristic_sharpen

    probs = torch.rand(len(keys), generator=torch.Generator().manual_seed(seed)) + 1e-3
    probs /= probs.sum()
    out = heuristic_sharpen(keys, probs, drafter_keys=keys[:3], lam=0.1)
    assert abs(float(out.sum()) - 1.0) < 1e-5 and float(out.min()) >= 0
    # Each confident drafter key gains the unmodified mass of its extensions (no chaining); then renormalise.
    raw = probs.clone()
    for i, key in enumerate(keys[:3]):
        if float(probs[i]) > 0.1:
            raw[i] += sum(float(probs[j]) for j, other in enumerate(keys) if j != i and other.startswith(key))
    torch.testing.assert_close(out, raw / raw.sum())


@settings(max_examples=80, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    scale=st.floats(2.0, 40.0),
    sharpen=st.sampled_from(["none", "heuristic"]),
    k=st.integers(1, 12),
)
def test_gac_from_row_summaries_equals_gac_over_the_whole_union(tables, seed, scale, sharpen, k):
    """What a member sends (:mod:`ensemble.tokens.distribution`) decides GaC exactly: the same choice and the same recorded top-k
    (values to float32 rounding) as fusing whole rows over the union vocabulary, peaked rows and flat ones."""
    names = list(tables)
    generator = torch.Generator().manual_seed(seed)
    logits = [torch.randn(tables[n].vocab_size, generator=generator) * scale for n in names]
    sized = Fuser(names, [tables[n] for n in names], fusion="gac", top_k=k, sharpen=sharpen).fuse(logits, drafter=seed % 3)
    whole = Fuser(names, [tables[n] for n in names], fusion="gac", top_k=k, sharpen=sharpen, whole=True).fuse(logits, drafter=seed % 3)
    assert sized.choice == whole.choice
    for mine, theirs in ((sized.record.before, whole.record.before), (sized.record.after, whole.record.after)):
        assert (mine is None) == (theirs is None)
        if mine is not None:
            assert [key for key, _ in mine] == [key for key, _ in theirs]
            assert all(abs(a - b) <= 1e-6 for (_, a), (_, b) in zip(mine, theirs, strict=True))


def test_gac_from_member_summaries_reads_a_few_numbers_and_decides_alike(tables):
    """GaC over distributions from member processes (summaries, other ids fetched) on peaked rows: the fused record
    equals the one from whole rows in this process, the summaries decided it (no whole row was sent), and the members
    were asked for a few hundred numbers, not 460k."""
    from ensemble.tokens.distribution import FullDist, RowMath, SizedDist, summary_size

    names = list(tables)
    generator = torch.Generator().manual_seed(7)
    logits = [torch.randn(tables[n].vocab_size, generator=generator) * 12 for n in names]
    size = summary_size(10)
    asked = {"ids": 0, "rows": 0}

    def remote(row):
        math = RowMath(row)

        def fetch(ids):
            asked["ids"] += len(ids)
            return math.values(ids)

        def whole():
            asked["rows"] += 1
            return row

        return SizedDist(math.summary(size), fetch, whole, size)

    for sharpen in ("none", "heuristic"):
        fuser = Fuser(names, [tables[n] for n in names], fusion="gac", sharpen=sharpen)
        local = fuser.fuse([FullDist(row, size) for row in logits])
        sized = fuser.fuse([remote(row) for row in logits])
        assert len(sized.keys) < fuser.union.size  # decided from the summaries
        assert sized.choice == local.choice and sized.record.before == local.record.before and sized.record.after == local.record.after
    assert asked["rows"] == 0 and 0 < asked["ids"] < 2000
