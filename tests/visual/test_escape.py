"""The escaping every view goes through (:mod:`visual.escape`), and hostile model output, names and settings in every view: shown as text, never as markup."""

from __future__ import annotations

import copy
import re
from html.parser import HTMLParser

import pytest

import visual
from ensemble.trace import RunTrace
from tests.visual.helpers import NAMES, ROWS, comparison, load, plain
from visual.escape import safe, whitespace


def test_safe_escapes_html_and_template_characters():
    assert safe("<a href='x' title=\"y\">&</a>") == "&lt;a href=&#x27;x&#x27; title=&quot;y&quot;&gt;&amp;&lt;/a&gt;"
    assert safe("${x} `y` {{z}}") == "&#36;&#123;x&#125; &#96;y&#96; &#123;&#123;z&#125;&#125;"
    assert safe(None) == "" and safe(3) == "3"
    assert safe("a\udce6b") == "a\ufffdb"  # a lone surrogate from an uploaded trace


def test_whitespace_markers():
    assert whitespace("a b\tc\nd") == 'a<span class="ws">·</span><wbr>b<span class="ws">→</span><wbr>c<span class="ws">↵</span><br>d'
    assert whitespace("a \n<b>", show=False) == "a <br>&lt;b&gt;"
    assert whitespace(" \n", breaks=False) == '<span class="ws">·↵</span>'
    assert "<br>" not in whitespace("x\ny", show=False, breaks=False)


PAYLOADS = ["<script>alert(1)</script>", "<img src=x onerror=alert(1)>", "${alert(1)}", "{{7*7}}", "`x`"]


KEEP = {"decision", "method", "created", "condition", "sharpen", "fusion", "stop_reason", "model"}  # model: SAFE's "ensemble"


def hostile(trace: RunTrace) -> RunTrace:
    """The trace with payloads in its text, token texts, model names, keys, candidates and messages."""
    data = copy.deepcopy(trace.to_dict())
    names = {m: m + PAYLOADS[i % len(PAYLOADS)] for i, m in enumerate(trace.models)}
    count = iter(range(10**9))

    def payload() -> str:
        return PAYLOADS[next(count) % len(PAYLOADS)]

    inserted = []  # (old offset, payload) inserted before the token starting there
    new_text, last = "", 0
    for tok in data["tokens"]:
        new_text += data["text"][last : tok["start"]]
        if tok["start"] < tok["end"] and tok["start"] >= last:
            p = payload()
            inserted.append((tok["start"], p))
            new_text += p
        new_text += data["text"][max(tok["start"], last) : tok["end"]]
        last = max(last, tok["end"])
    new_text += data["text"][last:]

    def shift(offset: int) -> int:
        """New offset of an old one: a payload belongs to the token that starts where it was inserted."""
        return offset + sum(len(p) for at, p in inserted if at < offset)

    def walk(value, key=None):
        if isinstance(value, dict):
            return {names.get(k, k): walk(v, k) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v, key) for v in value]
        if isinstance(value, str):
            return names.get(value, value if key in KEEP else value + payload())
        return value

    def splits(rows):
        out = []
        for _, s, e in rows:
            a, b = shift(s), shift(e)
            out.append([new_text[a:b] if b <= len(new_text) else "x" * (b - a), a, b])
        return out

    tokens = data.pop("tokens")
    data = walk(data)
    data["text"] = new_text
    for tok in tokens:
        details = tok.get("details") or {}
        raw_splits = details.pop("splits", None)
        boundary = details.pop("boundary", None)
        tok.update(walk({k: v for k, v in tok.items() if k not in ("text", "start", "end", "index")}))
        tok["start"], tok["end"] = shift(tok["start"]), shift(tok["end"])
        tok["text"] = new_text[tok["start"] : tok["end"]]
        if raw_splits is not None:
            tok["details"]["splits"] = {names.get(m, m): splits(rows) for m, rows in raw_splits.items()}
        if boundary is not None:
            tok["details"]["boundary"] = shift(boundary)
    data["tokens"] = tokens
    data["warnings"] = [*PAYLOADS]
    data["error"] = PAYLOADS[0]
    return RunTrace.from_dict(data)


class Tags(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.bad: list = []

    def handle_starttag(self, tag, attrs):
        if tag in ("script", "img", "iframe", "object", "embed", "style"):
            self.bad.append(tag)
        for name, value in attrs:
            if name.startswith("on") or (value or "").strip().lower().startswith("javascript:"):
                self.bad.append((tag, name, value))


def assert_harmless(html: str) -> None:
    assert "<script" not in html.lower() and "<img" not in html.lower()
    assert "${" not in html and "{{" not in html and "`" not in html
    parser = Tags()
    parser.feed(html)
    assert parser.bad == []


def figure_strings(fig) -> list[str]:
    out = []

    def walk(value):
        if isinstance(value, str):
            out.append(value)
        elif isinstance(value, dict):
            for v in value.values():
                walk(v)
        elif isinstance(value, list | tuple):
            for v in value:
                walk(v)
        elif hasattr(value, "tolist"):
            walk(value.tolist())

    walk(fig.to_plotly_json())
    return out


@pytest.mark.parametrize("name", NAMES)
def test_hostile_trace_renders_harmless(name):
    trace = hostile(load(name))
    assert any(p in trace.text for p in PAYLOADS) and any(p in trace.models[0] for p in PAYLOADS)
    assert "".join(trace.text[r.start : r.end] for r in trace.tokens) == trace.text
    outputs = [
        visual.strip_html(trace),
        visual.strip_html(trace, show_whitespace=False),
        visual.legend_html(trace.method, trace.models),
        visual.rounds_html(trace),
        visual.stats_html(trace),
        visual.results_html([{**ROWS[0], "method": p} for p in PAYLOADS]),
    ]
    builder = visual.StripBuilder(trace.method, trace.models)
    outputs.append("".join(builder.add([r], trace.text) for r in trace.tokens))
    figures = [visual.weights_figure(trace), visual.compare_figure({p: trace for p in PAYLOADS})]
    figures += [visual.score_heatmap(trace, k) for k in range(len(trace.rounds))]
    for record in trace.tokens:
        outputs += [visual.explain(trace, record.index), visual.tokenization_html(trace, record.index)]
    with_data = [r for r in trace.tokens if r.fusion is not None or r.topk][:6]  # figures are slow to build
    for record in with_data:
        figures += [visual.topk_figure(trace, record.index), visual.fusion_figure(trace, record.index)]
    for html in outputs:
        assert_harmless(html)
    assert any("&lt;script&gt;" in html for html in outputs)  # the payload is shown, as text
    for fig in figures:
        if fig is not None:
            for text in figure_strings(fig):
                assert_harmless(text)
    if name == "safe":  # the blocked-token explanation still works with hostile text and names
        assert "keeps" in plain(visual.explain(trace, 1)) and "&lt;script&gt;" in visual.explain(trace, 1)


def test_hostile_tokenizer_comparison_and_report(tmp_path):
    data = comparison()
    data["text"] = data["text"][:5] + "`{{x}}`" + data["text"][5:]
    for info in data["models"].values():
        for tok in info["tokens"]:
            tok["text"] = tok["text"] + PAYLOADS[1]
    data["models"] = {name + PAYLOADS[i]: info for i, (name, info) in enumerate(data["models"].items())}
    data["notes"] = [PAYLOADS[2]]
    assert_harmless(visual.tokenizers_html(data))
    path = tmp_path / "r.html"
    visual.write_report([{**ROWS[0], "method": p} for p in PAYLOADS], path, PAYLOADS[0], {PAYLOADS[1]: PAYLOADS[2]})
    html = path.read_text(encoding="utf-8")
    without_plotly = re.sub(r"<script\b[^>]*>.*?</script>", "", html, flags=re.S)
    assert_harmless(re.sub(r"<style>.*?</style>", "", without_plotly, flags=re.S))
    assert "alert(1)</script>" not in html  # plotly's JSON escapes '<' too
