"""What the visual tests share: the golden traces, parsers of the HTML the views write, and hand-written inputs."""

from __future__ import annotations

import math
import re
from html.parser import HTMLParser
from itertools import pairwise

import visual
from ensemble.trace import RunTrace, TokenRecord
from tests.conftest import FIXTURES

NAMES = ["single", "safe", "safe_math", "unite", "gac", "specem"]


def load(name: str) -> RunTrace:
    return RunTrace.from_json((FIXTURES / f"{name}.json").read_text(encoding="utf-8"))


class Spans(HTMLParser):
    """The top-level ``el-tok`` spans of a strip: attributes and text (``<br>`` as a newline)."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tokens: list[dict] = []
        self.depth = 0
        self.outside = ""

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "span" and self.depth == 0:
            assert "el-tok" in attrs.get("class", "").split(), attrs
            self.tokens.append({"attrs": attrs, "text": ""})
            self.depth = 1
        elif tag == "span":
            self.depth += 1
        elif tag == "br":
            assert self.depth > 0
            self.tokens[-1]["text"] += "\n"
        else:
            assert tag == "wbr", tag

    def handle_endtag(self, tag):
        if tag == "span":
            self.depth -= 1

    def handle_data(self, data):
        if self.depth:
            self.tokens[-1]["text"] += data
        else:
            self.outside += data


def parse_strip(html: str) -> list[dict]:
    parser = Spans()
    parser.feed(html)
    parser.close()
    assert parser.depth == 0 and parser.outside == ""
    return parser.tokens


def unglyph(text: str) -> str:
    return text.replace("↵\n", "\n").replace("·", " ").replace("→", "\t").replace("␍", "\r")


def groups_of(trace: RunTrace) -> list[list[TokenRecord]]:
    return visual.token_groups(trace.tokens)


def plain(html: str) -> str:
    """Visible text of an HTML fragment (tags dropped, entities decoded)."""

    class Text(HTMLParser):
        def __init__(self):
            super().__init__(convert_charrefs=True)
            self.out = ""

        def handle_data(self, data):
            self.out += data

    parser = Text()
    parser.feed(html)
    return parser.out


class Grid(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.items: list[dict] = []
        self.current = None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        cls = attrs.get("class", "").split()
        if tag == "span" and cls and cls[0] in ("el-box", "el-edge", "el-axis", "el-grid-label"):
            self.current = {"cls": cls, "style": attrs.get("style", ""), "title": attrs.get("title", ""), "text": ""}
            self.items.append(self.current)

    def handle_data(self, data):
        if self.current is not None:
            self.current["text"] += data

    def handle_endtag(self, tag):
        pass


def grid_items(html: str) -> list[dict]:
    parser = Grid()
    parser.feed(html)
    return parser.items


def columns(item: dict) -> tuple[int, int]:
    a, b = re.search(r"grid-column: (\d+) / (\d+)", item["style"]).groups()
    return int(a), int(b)


def grid_rows(html: str) -> dict[str, list[dict]]:
    """Row label -> that row's boxes (by the ``grid-row`` they are placed on)."""
    items = grid_items(html)
    label_of = {re.search(r"grid-row: (\d+)", i["style"]).group(1): i["text"] for i in items if i["cls"][0] == "el-grid-label"}
    rows: dict[str, list[dict]] = {name: [] for name in label_of.values()}
    for item in items:
        if item["cls"][0] == "el-box":
            rows[label_of[re.search(r"grid-row: (\d+)", item["style"]).group(1)]].append(item)
    return rows


def comparison() -> dict:
    """``ensemble.tokens.align.compare`` output for 'Sofia 🙂 東京' (qwen, smollm2, gemma3), written out by hand."""

    def toks(rows):
        return [{"id": i, "text": t, "start": s, "end": e, "bytes": b} for i, (t, s, e, b) in enumerate(rows)]

    models = {
        "qwen": toks([("S", 0, 1, False), ("of", 1, 3, False), ("ia", 3, 5, False), (" 🙂", 5, 7, False), (" ", 7, 8, False), ("東", 8, 9, False), ("京", 9, 10, False)]),
        "smollm2": toks([("S", 0, 1, False), ("of", 1, 3, False), ("ia", 3, 5, False), (" 🙂", 5, 7, False), (" ", 7, 8, False), ("<0x9D>", 8, 9, True), ("<0xB1>", 8, 9, True), ("<0xE4><0xBA>", 9, 10, True), ("<0xAC>", 9, 10, True)]),
        "gemma3": toks([("Sofia", 0, 5, False), (" 🙂", 5, 7, False), (" 東京", 7, 10, False)]),
    }
    bounds = {name: sorted({t["start"] for t in tokens} | {10}) for name, tokens in models.items()}
    union = sorted(set().union(*bounds.values()))
    shared = sorted(set.intersection(*(set(b) for b in bounds.values())))
    return {
        "text": "Sofia 🙂 東京",
        "models": {
            name: {"tokens": tokens, "count": len(tokens), "boundaries": bounds[name], "missing": sorted(set(union) - set(bounds[name]))}
            for name, tokens in models.items()
        },
        "shared_boundaries": shared,
        "all_boundaries": union,
        "segments": [{"start": a, "end": b, "text": "Sofia 🙂 東京"[a:b]} for a, b in pairwise(union)],
        "agreement": round(100 * (len(shared) - 2) / (len(union) - 2), 2),
        "notes": [],
    }


ROWS = [
    {"method": "single", "n": 50, "correct": 20, "accuracy": 0.4, "ci_low": 0.27, "ci_high": 0.54, "mean_et": 0.0,
     "tokens_per_s": 9.5, "s_per_question": 12.0, "corruption_rate": 0.0, "mean_tokens": 150.0},
    {"method": "safe", "n": 50, "correct": 24, "accuracy": 0.48, "ci_low": 0.35, "ci_high": 0.62, "mean_et": 0.12,
     "tokens_per_s": 4.1, "s_per_question": 30.5, "corruption_rate": 0.02, "mean_tokens": 140.0},
    {"method": "unite", "n": 50, "correct": 18, "accuracy": 0.36, "ci_low": 0.24, "ci_high": 0.5, "mean_et": 1.0,
     "tokens_per_s": 2.0, "s_per_question": 60.0, "corruption_rate": None, "mean_tokens": 160.0},
]


def lab(rgb: tuple[float, float, float]) -> tuple[float, float, float]:
    """CIE L*a*b* (D65) of an sRGB colour given as 0-255 channels."""

    def linear(c: float) -> float:
        c /= 255
        return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4

    r, g, b = (linear(c) for c in rgb)
    xyz = (0.4124 * r + 0.3576 * g + 0.1805 * b, 0.2126 * r + 0.7152 * g + 0.0722 * b, 0.0193 * r + 0.1192 * g + 0.9505 * b)

    def f(t: float) -> float:
        return t ** (1 / 3) if t > 0.008856 else 7.787 * t + 16 / 116

    fx, fy, fz = (f(v / w) for v, w in zip(xyz, (0.95047, 1.0, 1.08883), strict=True))
    return 116 * fy - 16, 500 * (fx - fy), 200 * (fy - fz)


def painted(colour: str, alpha: float = 1.0, background: tuple[int, int, int] = (255, 255, 255)) -> tuple[float, ...]:
    """The colour ``#RRGGBB`` at ``alpha`` over ``background``, as 0-255 channels (what a tint paints)."""
    rgb = (int(colour[i : i + 2], 16) for i in (1, 3, 5))
    return tuple(alpha * c + (1 - alpha) * k for c, k in zip(rgb, background, strict=True))


def delta_e(a: tuple[float, ...], b: tuple[float, ...]) -> float:
    """CIE76 colour difference of two 0-255 sRGB colours (about 2.3: just noticeable; the decision tints differ by
    6 to 30)."""
    return math.dist(lab(a), lab(b))
