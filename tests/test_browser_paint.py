"""What the browser paints, measured: every character inside its own token's box, in every view that draws
tokens, at a laptop's, a projector's and a phone's size.

A DOM Range over one character (a grapheme: an emoji with its modifiers, a flag, a ZWJ sequence is one) has the
box the font painted it in; a token's own boxes are its client rects. A ligature across two tokens ("fi" of
S|of|ia) paints the second token's character inside the first token's box and gives it 0 px; kerning across an
edge shifts it over. The markup is right either way: only the painted boxes tell.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.embedded]

FIXTURES = Path(__file__).parent / "fixtures"

LIGATURES = "office fluffy affine fjord"
LIGATURE_CUTS = ["of", "fi", "ce", " f", "luf", "f", "y", " af", "f", "ine", " f", "jord"]
"""Cut where the font's ligatures (fi, fl, ff, ffi, fj) and kerning pairs would join two tokens' glyphs."""
CJK_EMOJI_CUTS = ["我们", "明天", "去", "普罗", "夫迪夫", "。", "東京", "は", "大き", "い", " I", " ❤️", " Bulgaria", " 🇧🇬",
                  " and", " coding", " 👩‍💻", " at", " 3", "am"]
CODE_CUTS = ["Here", ":", "\n\n", "```", "python", "\n", "def", " is", "_p", "al", "(s", "):", "\n   ", " return", " s",
             " ==", " s", "[::", "-1", "]", "\n", "```", "\n", "Done", " office"]


def fixture_trace(cuts: list[str], prompt: str = "a fixture of the paint tests") -> dict:
    """A SAFE trace (as JSON data) whose tokens are ``cuts``, their decisions alternating between the
    recorded fixture's consensus and blocked records (so the tokens carry both tints and underlines)."""
    data = json.loads((FIXTURES / "safe.json").read_text())
    templates = {}
    for record in data["tokens"]:
        templates.setdefault(record["decision"], record)
    kinds = [templates["consensus"], templates["oov_blocked"]]
    tokens, start = [], 0
    for i, piece in enumerate(cuts):
        tokens.append(dict(kinds[i % 2], index=i, text=piece, start=start, end=start + len(piece), topk=[[piece, 0.9]]))
        start += len(piece)
    data.update(prompt=prompt, text="".join(cuts), tokens=tokens)
    data["stats"] = dict(data["stats"], generated_tokens=len(tokens))
    return data


# Every grapheme of every token under ROOT that paints something: its box against its token's boxes.
PAINT_JS = """([root, tokens]) => {
  const segmenter = new Intl.Segmenter(undefined, {granularity: 'grapheme'});
  const bad = [];
  let checked = 0;
  const scope = document.querySelector(root);
  for (const token of scope.querySelectorAll(tokens)) {
    const boxes = [...token.getClientRects()];
    const walker = document.createTreeWalker(token, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      for (const {segment, index} of segmenter.segment(node.data)) {
        // a space or a newline paints nothing, nor a joiner or variation selector cut off from its emoji
        if (!segment.trim() || /^\\p{Default_Ignorable_Code_Point}+$/u.test(segment)) continue;
        const range = document.createRange();
        range.setStart(node, index);
        range.setEnd(node, index + segment.length);
        const rects = [...range.getClientRects()].filter((r) => r.height > 0);
        const r = rects[0];
        checked += 1;
        const inside = r && r.width >= 1 && boxes.some((b) => r.left >= b.left - 0.5 && r.right <= b.right + 0.5
          && r.top + r.height / 2 >= b.top && r.top + r.height / 2 <= b.bottom);
        if (!inside) bad.push({token: token.dataset.i ?? token.textContent, char: segment,
          char_box: r ? [r.left, r.right, r.width].map((x) => Math.round(x * 10) / 10) : null,
          token_boxes: boxes.map((b) => [b.left, b.right].map((x) => Math.round(x * 10) / 10))});
      }
    }
  }
  return {checked, bad};
}"""


def paint_failures(page, root: str, tokens: str) -> dict:
    """``{"checked": N, "bad": [...]}``: the characters under ``root`` painted outside their token (``tokens``)."""
    return page.evaluate(PAINT_JS, [root, tokens])


def inject(page, html: str) -> None:
    """Show ``html`` (escaped views made by visual/) in the app's own container, under the app's stylesheet."""
    page.evaluate("""(html) => {
      let box = document.getElementById('paint-probe');
      if (!box) {
        box = document.createElement('div');
        box.id = 'paint-probe';
        const host = document.querySelector('#strip')?.parentElement || document.querySelector('.gradio-container');
        host.prepend(box);
      }
      box.innerHTML = html;
      box.scrollIntoView();
    }""", html)


SIZES = {"desktop": ((1366, 768), False), "projector": ((1366, 768), True), "phone": ((390, 844), False)}


def open_app(browser, app_url, size, projector=False):
    context = browser.new_context(viewport={"width": size[0], "height": size[1]}, accept_downloads=True)
    page = context.new_page()
    page.set_default_timeout(120_000)
    page.goto(app_url)
    page.wait_for_function("() => (document.querySelector('#status')?.innerText || '').includes('recorded run')")
    if projector:
        page.locator("#projector input").check()
        page.wait_for_function("() => document.querySelector('.gradio-container').classList.contains('el-large')")
    return context, page


def upload(page, path: Path) -> None:
    page.get_by_role("tab", name="Trace").click()
    page.locator("#upload input[type=file]").set_input_files(str(path))
    page.wait_for_function("() => (document.querySelector('#trace-status')?.innerText || '').includes('Loaded')")
    page.get_by_role("tab", name="Run").click()
    page.wait_for_function("() => (document.querySelector('#status')?.innerText || '').includes('Replaying')")


def assert_painted_inside(page, root: str, tokens: str, at_least: int) -> None:
    result = paint_failures(page, root, tokens)
    assert result["checked"] >= at_least, result
    assert not result["bad"], f"{len(result['bad'])} of {result['checked']} characters painted outside their token: {result['bad'][:6]}"


ALL_CUTS = LIGATURE_CUTS + [" "] + CJK_EMOJI_CUTS + [" "] + CODE_CUTS


@pytest.mark.parametrize("where", list(SIZES))
def test_every_character_is_painted_inside_its_token(browser, app_url, tmp_path, where):
    """The first example (S|of|ia: the font's "fi" ligature joined #1 and #2), a ligature-heavy text, CJK, emoji
    and a code block, in the strip, the Compare cards, the aligned Tokenizers view and the exported page."""
    import visual
    from ensemble.trace import RunTrace

    size, projector = SIZES[where]
    context, page = open_app(browser, app_url, size, projector)
    assert_painted_inside(page, "#strip", ".el-tok", 30)  # the recorded Sofia run
    path = tmp_path / "paint.json"
    path.write_text(json.dumps(fixture_trace(ALL_CUTS)), encoding="utf-8")
    upload(page, path)
    assert_painted_inside(page, "#strip", ".el-tok", 80)
    code = page.locator("#strip .el-tok.code")
    opening = CODE_CUTS.index("```")
    assert code.count() == CODE_CUTS.index("```", opening + 1) - opening + 1  # the fenced block, fences included
    assert "mono" in code.first.evaluate("e => getComputedStyle(e).fontFamily").lower()
    assert "mono" not in page.locator("#strip .el-tok").first.evaluate("e => getComputedStyle(e).fontFamily").lower()
    trace = RunTrace.from_json(path.read_bytes())
    visual_html = visual.compare_html({"a": trace, "b": RunTrace.from_json((FIXTURES / "safe.json").read_bytes())})
    inject(page, visual_html)  # the Compare cards, under the app's stylesheet
    assert_painted_inside(page, "#paint-probe", ".el-tok", 100)
    page.get_by_role("tab", name="Tokenizers").click()
    page.locator("#tok-text textarea").fill(LIGATURES + " Sofia " + "".join(CJK_EMOJI_CUTS))
    page.locator("#tok-button").click()
    page.wait_for_function("() => (document.querySelector('#tok-view')?.innerText || '').includes('fjord')")
    assert_painted_inside(page, "#tok-view", ".el-box", 60)
    context.close()
    if where == "desktop":  # the offline page: its own fonts, the same rules
        out = tmp_path / "run.html"
        out.write_text(visual.run_document(trace), encoding="utf-8")
        context = browser.new_context(viewport={"width": size[0], "height": size[1]})
        page = context.new_page()
        page.goto(out.as_uri())
        assert_painted_inside(page, ".el-strip", ".el-tok", 80)
        context.close()

