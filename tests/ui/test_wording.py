"""First-contact words (issue 39): the status line after a run, the legend, the engine controls and the inspector
say what happened in plain words first; the papers' symbols and the command line's ids (E/T, λ, η, "GaC gate",
"llamacpp", ``fork --at 5``) come only after them, in brackets or in the muted detail."""

from __future__ import annotations

import re

import pytest

import visual
from ensemble.settings import specs
from ensemble.trace.readable import DECISION_WORDS
from tests.visual.helpers import load
from ui.running import done_message
from visual.style import DECISION_LABELS

JARGON = ("E/T", "λ", "η", "GaC gate", "llamacpp", "fork --at", "eos")


def _outside_brackets(text: str) -> str:
    """``text`` without its bracketed parts (nested ones too): what a reader meets first."""
    while True:
        shorter = re.sub(r"\([^()]*\)", "", text)
        if shorter == text:
            return text
        text = shorter


@pytest.mark.parametrize("name", ["single", "safe", "safe_math", "unite", "gac", "specem"])
def test_the_done_line_says_how_much_was_ensembled_in_words(name):
    trace = load(name)
    line = done_message(trace)
    plain = _outside_brackets(line)
    assert not [j for j in JARGON if j in plain], line
    s = trace.stats
    if name in ("safe", "safe_math", "unite", "gac"):
        assert line.startswith(f"Done: ensembled {s.ensemble_steps} of {s.generated_tokens} tokens (E/T ")
    assert "stop: " + {"eos": "the answer ended by itself", "budget": "the token budget"}[s.stop_reason] in line


def test_controls_legend_and_decision_words_put_plain_words_first():
    labels = [spec.label for spec in specs().values() if spec.label]
    labels += list(DECISION_LABELS.values()) + list(DECISION_WORDS.values())
    for label in labels:
        plain = _outside_brackets(label)
        assert plain.strip() and not [j for j in JARGON if j in plain], label
    assert any("λ" in label for label in labels) and any("η" in label for label in labels)  # kept, as the detail


def test_the_inspector_gives_the_command_line_only_as_muted_detail():
    math = load("safe_math")
    record = next(r for r in math.tokens if r.decision == "ensembled_replaced" and r.text == " calculate")
    html = visual.explain(math, record.index)
    first, _, muted = html.partition('<p class="el-muted">')
    assert "fork --at" not in first and "fork --at" in muted and "What if?" in muted
