"""The adapter: parity with generate(), cache equality, incremental re-tokenization."""

from __future__ import annotations

import random

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ensemble.methods import EnsembleRun
from ensemble.methods.member import ModelAdapter
from ensemble.settings import Settings

PROMPTS = ["Sofia went to Plovdiv in 1999. Where did she go?", "Write a haiku about 中文 and 🙂."]
PIECES = st.sampled_from(["a", "b", " the", " Sofia", "ia", "1", "99", ".", ",", "\n", " ", "  ", "中", "文", "🙂", "é", "e\u0301", "\t", "!"])


def _generate_ids(loaded, prompt: str, n: int) -> list[int]:
    ids = loaded.prompt_ids(prompt)
    with torch.inference_mode():
        out = loaded.model.generate(torch.tensor([ids]), max_new_tokens=n, do_sample=False)
    gen = out[0, len(ids):].tolist()
    eos = loaded.keys.eos_ids
    return gen[: next((i for i, t in enumerate(gen) if t in eos), len(gen))]


def _adapter_ids(loaded, prompt: str, n: int) -> list[int]:
    job = EnsembleRun([loaded], prompt, "single", Settings(max_new_tokens=n, stop_strings=[]))
    for _ in job.events():
        pass
    return job.adapters[0].ids


@pytest.mark.parametrize("name", ["qwen", "smollm2", "gemma3"])
def test_tiny_parity_with_generate(tiny, name):
    for prompt in PROMPTS:
        assert _adapter_ids(tiny[name], prompt, 40) == _generate_ids(tiny[name], prompt, 40)


@pytest.mark.embedded
@pytest.mark.parametrize("name", ["qwen", "smollm2", "gemma3"])
def test_embedded_parity_with_generate(embedded, name):
    prompt = PROMPTS[0]
    assert _adapter_ids(embedded[name], prompt, 24) == _generate_ids(embedded[name], prompt, 24)


def _full_logits(adapter: ModelAdapter, extra=()) -> torch.Tensor:
    ids = torch.tensor([adapter.all_ids() + list(extra)])
    with torch.inference_mode():
        return adapter.model(input_ids=ids).logits[0].float()


OPS = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(1, 6)),
        st.tuples(st.just("truncate"), st.integers(0, 30)),
        st.tuples(st.just("sync"), st.lists(PIECES, min_size=1, max_size=6)),
        st.tuples(st.just("verify"), st.integers(1, 5)),
    ),
    min_size=1,
    max_size=12,
)


@settings(max_examples=40)
@given(ops=OPS, which=st.sampled_from(["qwen", "smollm2", "gemma3"]), seed=st.integers(0, 1000))
def test_cache_equals_full_recompute(tiny, ops, which, seed):
    """After any sequence of commits, crops, re-syncs and verify passes, cached logits == a full recompute."""
    rng = random.Random(seed)
    adapter = ModelAdapter(tiny[which])
    adapter.start("Tell me about Plovdiv.")
    vocab = adapter.keys.vocab_size
    for op, arg in ops:
        if op == "append":
            for _ in range(arg):
                adapter.append(rng.randrange(vocab))
        elif op == "truncate":
            adapter.truncate_tokens(min(arg, len(adapter.ids)))
        elif op == "sync":
            adapter.sync(adapter.text + "".join(arg))
        else:
            extra = [rng.randrange(vocab) for _ in range(arg)]
            rows = adapter.logits_with(extra)
            torch.testing.assert_close(rows, _full_logits(adapter, extra)[-len(extra) - 1 :], atol=1e-4, rtol=0)
        torch.testing.assert_close(adapter.next_logits(), _full_logits(adapter)[-1], atol=1e-4, rtol=0)


@pytest.mark.embedded
def test_embedded_cache_equals_full_recompute(embedded):
    rng = random.Random(7)
    for name in ("smollm2", "gemma3"):
        adapter = ModelAdapter(embedded[name])
        adapter.start(PROMPTS[0])
        for step in range(6):
            for _ in range(rng.randint(1, 4)):
                adapter.append(int(torch.argmax(adapter.next_logits())))
            if step % 2:
                adapter.truncate_tokens(max(0, len(adapter.ids) - rng.randint(1, 3)))
            adapter.sync(adapter.text + rng.choice([" Sofia", "ia", ", 1999", "中"]))
            torch.testing.assert_close(adapter.next_logits(), _full_logits(adapter)[-1], atol=1e-4, rtol=0)


@settings(max_examples=120)
@given(
    base=st.lists(PIECES, max_size=30).map("".join),
    cut=st.integers(0, 200),
    suffix=st.lists(PIECES, max_size=8).map("".join),
    which=st.sampled_from(["qwen", "smollm2", "gemma3"]),
)
def test_incremental_retokenization_equals_full(tiny, base, cut, suffix, which):
    adapter = ModelAdapter(tiny[which])
    adapter.start("x")
    adapter.sync(base)
    assert adapter.ids == adapter.keys.encode(base)
    new = base[: min(cut, len(base))] + suffix
    adapter.sync(new)
    assert adapter.ids == adapter.keys.encode(new)
    assert adapter.text == new
    # The character spans agree with a fresh tokenization's.
    assert adapter.spans().boundaries() == adapter.keys.spans(new).boundaries()


def test_retokenization_keeps_the_cache_prefix(tiny):
    adapter = ModelAdapter(tiny["gemma3"])
    adapter.start("x")
    adapter.sync("Sofia went to Plovdiv in 1999 and")
    adapter.next_logits()
    before = adapter.stats.tokens
    adapter.sync("Sofia went to Plovdiv in 1999 and then")
    adapter.next_logits()
    assert adapter.stats.tokens - before <= 3  # only the re-tokenized tail is recomputed


def test_byte_tokens_report_their_character(tiny):
    adapter = ModelAdapter(tiny["smollm2"])
    adapter.start("x")
    ids = adapter.keys.encode("a🙂b")
    piece = "".join(adapter.append(i) for i in ids)
    assert piece == "a🙂b"
    spans = adapter.spans()
    assert list(zip(spans.starts, spans.ends)) == [(0, 1), (1, 2), (1, 2), (2, 3)]
    assert spans.boundaries() == [0, 1, 2, 3]
    adapter.truncate_tokens(2)  # half an emoji: the text holds whole characters only
    assert adapter.text == "a" and not adapter.finished


def test_draft_stops_on_whole_characters(tiny):
    adapter = ModelAdapter(tiny["qwen"])
    adapter.start("x")
    byte_ids = [adapter.keys.byte_ids[b] for b in "🙂".encode()]
    calls = iter([*byte_ids, *byte_ids])
    out = adapter.draft(1, lambda logits: next(calls))  # n=1, but the character needs its 4 bytes
    assert [t for t, _ in out] == byte_ids and adapter.text == "🙂" and adapter.finished
