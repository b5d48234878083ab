"""How a model sees the user's prompt: its chat template, or the plain Question/Answer one."""

from __future__ import annotations

from dataclasses import dataclass

PLAIN_TEMPLATE = "Question: {prompt}\nAnswer:\n"
"""For base models. It ends in a newline, a boundary every tokenizer keeps before a response that starts with
visible text (tests/ensemble/models/test_templates.py); "Answer:" + "To" read ``Answer:|To``, which no text has (Gemma gave
"To" 0.0000 there, docs/results.md "Prompt junctions")."""
PLAIN_STOPS = ("\nQuestion:",)


@dataclass
class PromptTemplate:
    """How a model sees the user's prompt: its chat template, or the plain Question/Answer one."""

    kind: str  # "chat" | "plain"
    stop_strings: tuple[str, ...] = ()

    def render(self, tokenizer, prompt: str) -> tuple[str, bool]:
        """The prompt text and whether the tokenizer should add its special tokens (BOS)."""
        if self.kind == "chat":
            text = tokenizer.apply_chat_template(
                [{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=False
            )
            return text, False
        return PLAIN_TEMPLATE.format(prompt=prompt), True
