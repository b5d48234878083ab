"""How a model sees the user's prompt: its chat template, or the plain Question/Answer one."""

from __future__ import annotations

from dataclasses import dataclass

PLAIN_TEMPLATE = "Question: {prompt}\nAnswer:\n"
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
