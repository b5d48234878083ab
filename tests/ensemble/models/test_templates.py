"""Every prompt junction is natural (issue 14): the ids a model sees for its templated prompt followed by
the response equal the ids of the whole text, for every embedded model and template.

Every template ends in a newline, a boundary every tokenizer keeps before a response that starts with
visible text. Gemma's plain template used to end in "Answer:", so a response starting "To" read
``Answer:|To``, a junction no text has: Gemma gave "To" probability 0.0000 and 0.14-0.41 to " "
(docs/results.md, "Prompt junctions"). A response that itself starts with whitespace merges with the
final newline in every tokenizer, the chat templates too (``\\n\\n`` is one token); the models do not
start that way, which the last test checks on the real models.
"""

from __future__ import annotations

import pytest

from ensemble.models import PLAIN_TEMPLATE, PromptTemplate

PROMPT = "A farmer has 17 sheep. All but 9 run away. Then he buys 4 more. How many sheep does he have now?"
OPENINGS = [
    "To", "The", "Let's", "Sofia", "Ça va", "Über", "17", "1.", "42 + 1 = 43", "3.5 hours", "$x$", "(a)", "[1]",
    "**Step 1**", "- item", "# Title", '"quoted"', "'single'", "def f(x):\n    return x", "```python\nx = 1\n```",
    "x  =  1", "Step 1: add.\nStep 2: done.", "a\n\nb", "我们去普罗夫迪夫", "東京", "Привет", "🙂 ok", "<div>",
]
TEMPLATES = {"qwen": "chat", "smollm2": "chat", "gemma3": "plain"}


@pytest.mark.parametrize("name", list(TEMPLATES))
def test_prompt_then_response_tokenizes_like_the_whole_text(tokenizers, name):
    tok = tokenizers[name]
    text, special = PromptTemplate(TEMPLATES[name]).render(tok, PROMPT)
    assert text.endswith("\n")
    prompt_ids = tok(text, add_special_tokens=special)["input_ids"]
    unnatural = [
        opening
        for opening in OPENINGS
        if tok(text + opening, add_special_tokens=special)["input_ids"]
        != prompt_ids + tok(opening, add_special_tokens=False)["input_ids"]
    ]
    assert unnatural == []


def test_plain_template_ends_at_a_newline():
    assert PLAIN_TEMPLATE.format(prompt="Hi") == "Question: Hi\nAnswer:\n"


@pytest.mark.embedded
def test_models_do_not_start_a_response_with_whitespace(embedded):
    """The one kind of opening that merges with the template's newline is whitespace; no model starts so."""
    import torch

    from ensemble.methods.member import ModelAdapter

    prompts = [PROMPT, "Write a Python function that returns the n-th Fibonacci number.", "Где находится Пловдив?"]
    for name, model in embedded.items():
        for prompt in prompts:
            adapter = ModelAdapter(model)
            adapter.start(prompt)
            first = adapter.keys.key(int(torch.argmax(adapter.next_logits())))
            assert first[:1].strip(), (name, prompt, first)
