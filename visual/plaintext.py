"""The inspector's explanation as plain text, for agents (the MCP tool) and terminals."""

from __future__ import annotations

from html.parser import HTMLParser

from ensemble.trace import RunTrace

from .inspector import explain


class _Text(HTMLParser):
    """The text of the explanation's HTML: paragraphs become lines, entities are decoded."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag in ("p", "br", "div") and self.parts and not self.parts[-1].endswith("\n"):
            self.parts.append("\n")

    def handle_data(self, data):
        self.parts.append(data)


def explain_text(trace: RunTrace, index) -> str:
    """:func:`explain` as plain text (for agents and terminals): the same sentences, one paragraph per line."""
    parser = _Text()
    parser.feed(explain(trace, index))
    parser.close()
    lines = [" ".join(line.split()) for line in "".join(parser.parts).split("\n")]
    return "\n".join(line for line in lines if line)
