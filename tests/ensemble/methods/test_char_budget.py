"""A response never ends inside a character: at the token budget the engine finishes the character with a few
more byte tokens (noted in the trace), or leaves the unfinished bytes out. Checked on every embedded tokenizer
with scripted models that must write emoji ZWJ sequences, flags, skin tones and CJK, cut at every budget."""

from __future__ import annotations

import pytest

from ensemble.methods import generate
from ensemble.methods.base import CHAR_EXTRA
from ensemble.settings import Settings
from tests.conftest import scripted_model

TARGET = "👩\u200d👩\u200d👧\u200d👦 🏳️\u200d🌈 👨🏽\u200d💻 🇧🇬 普罗夫迪夫 𠀋🫨 ok"  # Gemma has whole tokens for all but the last two
PROMPT = "Write the line."


def scripted(tiny_model, name: str):
    return scripted_model(tiny_model, name, TARGET, PROMPT)


def _splits(keys, ids: list[int], k: int) -> bool:
    """Whether the first ``k`` ids end inside a character."""
    try:
        b"".join(keys.text_bytes(i) for i in ids[:k]).decode("utf-8")
        return False
    except UnicodeDecodeError:
        return True


def _finished_prefix(keys, ids: list[int], budget: int) -> str:
    """What the response must be at ``budget``: the ids up to the first character boundary at or after it
    (within CHAR_EXTRA more tokens), else up to the last boundary before it."""
    for k in range(budget, min(budget + CHAR_EXTRA, len(ids)) + 1):
        data = b"".join(keys.text_bytes(i) for i in ids[:k])
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            continue
    for k in range(budget, -1, -1):
        try:
            return b"".join(keys.text_bytes(i) for i in ids[:k]).decode("utf-8")
        except UnicodeDecodeError:
            continue
    return ""


@pytest.mark.parametrize("name", ["qwen", "smollm2", "gemma3"])
@pytest.mark.parametrize("method", ["single", "unite"])
def test_the_budget_never_splits_a_character(tiny, name, method):
    loaded, script = scripted(tiny[name], f"s-{name}")
    assert loaded.keys.encode(TARGET) == script
    models = [loaded] if method == "single" else [loaded, loaded]  # two copies agree: UniTE keeps the script
    mid_character = 0
    cuts = [k for k in range(1, len(script)) if _splits(loaded.keys, script, k)]
    assert cuts  # every tokenizer cuts some of these characters into byte tokens
    budgets = sorted({1, len(script), *cuts[:: max(1, len(cuts) // 12)]})  # every kind of cut, a dozen runs
    for budget in budgets:
        trace = generate(models, PROMPT, method, Settings(max_new_tokens=budget, stop_strings=[]))
        expected = _finished_prefix(loaded.keys, script, budget)
        assert "\ufffd" not in trace.text, (budget, trace.text)
        assert trace.text == expected, (budget, trace.text, expected)
        extra = len(trace.tokens) - budget
        assert extra <= CHAR_EXTRA
        if extra > 0:
            mid_character += 1
            assert any(f"budget ({budget}) ended inside a character; {extra} more" in w for w in trace.warnings)
            assert trace.stats.generated_tokens == len(trace.tokens)
    assert mid_character == len([b for b in budgets if b in cuts])
