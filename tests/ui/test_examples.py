"""The featured examples (``ui.tabs.EXAMPLES``) end by themselves within the app's default token budget.

A visitor's first click is on an example; an answer the budget cuts ("\\[ 48 … stop: budget", issue 39) teaches them
that the tool is broken. Each example runs as the Run tab runs it (its prompt, method and models, the controls'
starting values) on both runtimes a server may use: llama.cpp (the app's choice on a CPU) and transformers (a
server without llama.cpp)."""

from __future__ import annotations

import pytest

from ensemble.methods import generate
from ensemble.models import quiet_progress
from ui.controls import control_names, initial_value, settings_from_controls
from ui.tabs import EXAMPLE_LABELS, EXAMPLES

pytestmark = [pytest.mark.embedded, pytest.mark.slow]


def _ends_by_itself(pool, index: int) -> None:
    prompt, method, names = EXAMPLES[index]
    settings = settings_from_controls({name: initial_value(name) for name in control_names()})
    trace = generate(pool.get_many(names, quiet_progress), prompt, method, settings)
    assert not trace.error
    assert trace.stats.stop_reason != "budget", (
        f"{EXAMPLE_LABELS[index]} is cut by the budget of {settings.max_new_tokens} tokens: {trace.text[-80:]!r}")


@pytest.mark.llamacpp
@pytest.mark.parametrize("index", range(len(EXAMPLES)), ids=EXAMPLE_LABELS)
def test_each_featured_example_ends_by_itself_on_llamacpp(llama_pool, index):
    _ends_by_itself(llama_pool, index)


@pytest.mark.parametrize("index", range(len(EXAMPLES)), ids=EXAMPLE_LABELS)
def test_each_featured_example_ends_by_itself_on_transformers(pool, index):
    _ends_by_itself(pool, index)
