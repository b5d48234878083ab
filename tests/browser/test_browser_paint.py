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

from tests.conftest import FIXTURES

pytestmark = [pytest.mark.browser, pytest.mark.embedded]


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


def _image(data: bytes):
    import io

    import numpy as np
    from PIL import Image

    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB")).astype(np.int16)


def _match(picture, shot, x0: int, y0: int, reach: int = 8) -> tuple[float, int, int]:
    """The share of ``shot``'s pixels that differ (by more than 48 in a channel) from ``picture`` at the best
    offset within ``reach`` px of (x0, y0), and that offset."""
    h, w = shot.shape[:2]
    best = (1.0, x0, y0)
    for dy in range(-reach, reach + 1):
        for dx in range(-reach, reach + 1):
            x, y = x0 + dx, y0 + dy
            if x < 0 or y < 0 or y + h > picture.shape[0] or x + w > picture.shape[1]:
                continue
            differ = (abs(picture[y:y + h, x:x + w] - shot).max(axis=2) > 48).mean()
            best = min(best, (float(differ), x, y))
    return best


def _colour_count(image, hex_colour: str) -> int:
    rgb = [int(hex_colour[i:i + 2], 16) for i in (1, 3, 5)]
    return int((abs(image - rgb).max(axis=2) <= 24).sum())


def _save_png(page, button: str) -> bytes:
    page.mouse.move(0, 0)
    with page.expect_download() as download:
        page.locator(button).click()
    return Path(download.value.path()).read_bytes()


@pytest.mark.parametrize("where", ["desktop", "phone"])
def test_the_pngs_are_the_page_drawn_again(browser, app_url, where):
    """"Save the strip as PNG" and the Tokenizers tab's PNG against screenshots of the same elements at the same
    scale (2x): the page's font, every token box where the page has it, each decision's underline (unanimous
    consensus solid, blocked dashed), the selection outline the page shows, and the aligned view's key markers."""
    from visual.style import DECISION_STYLE

    size = SIZES[where][0]
    context = browser.new_context(viewport={"width": size[0], "height": size[1]}, device_scale_factor=2,
                                  accept_downloads=True)
    page = context.new_page()
    page.set_default_timeout(120_000)
    page.goto(app_url)
    page.wait_for_function("() => (document.querySelector('#status')?.innerText || '').includes('recorded run')")
    page.locator("#strip .el-tok.oov_blocked").nth(1).click()  # a selected token: outlined on the page
    page.wait_for_function("() => (document.querySelector('#explanation')?.innerText || '').includes('gemma3')")
    picture = _image(_save_png(page, "#strip-png"))
    shot = _image(page.locator("#strip").screenshot())
    shot = shot[:, : picture.shape[1] - 32]  # the picture ends where the strip's text does (+ its frame)
    legend = page.evaluate("() => document.querySelector('#legend').getBoundingClientRect().height")
    differ, x, y = _match(picture, shot, 24, round(2 * (12 + legend + 8)))
    assert differ < 0.02, f"{differ:.1%} of the strip's pixels differ from the page (best at {x},{y})"
    for decision in ("consensus", "oov_blocked"):  # each decision's underline, in its colour
        colour = DECISION_STYLE[decision][0]
        on_page, in_png = _colour_count(shot, colour), _colour_count(picture[y:y + shot.shape[0], x:x + shot.shape[1]], colour)
        assert on_page > 50 and abs(in_png - on_page) <= 0.1 * on_page, (decision, on_page, in_png)
    page.get_by_role("tab", name="Tokenizers").click()
    page.wait_for_function("() => (document.querySelector('#tok-view')?.innerText || '').includes('%')")
    picture = _image(_save_png(page, "#tok-png"))
    view = page.locator("#tok-view")
    view.scroll_into_view_if_needed()
    shot = _image(view.screenshot())
    shot = shot[:, : picture.shape[1] - 32]
    differ, x, y = _match(picture, shot, 24, 24)
    # (on a phone the view scrolls sideways: the page fades its right edge where the picture shows the whole view)
    assert differ < 0.03, f"{differ:.1%} of the aligned view's pixels differ from the page (best at {x},{y})"
    key = page.locator("#tok-view .el-grid-key")
    assert key.count() and key.first.locator(".el-edge-sample").count() >= 2
    for sample in key.first.locator(".el-edge-sample").all():  # the legend markers are painted in the picture
        box = sample.bounding_box()
        origin = view.bounding_box()
        left, top = x + round(2 * (box["x"] - origin["x"])), y + round(2 * (box["y"] - origin["y"]))
        patch = picture[top:top + round(2 * box["height"]), left:left + round(2 * box["width"])]
        assert patch.size and abs(patch.mean(axis=(0, 1)) - picture[2, 2]).max() > 30, box  # not the background
    context.close()


def _pixels(page, locator_or_clip):
    data = page.screenshot(clip=locator_or_clip) if isinstance(locator_or_clip, dict) else locator_or_clip.screenshot()
    return _image(data)


@pytest.mark.parametrize("where", ["desktop", "phone"])
def test_the_top_k_chart_is_painted_on_the_first_click(browser, app_url, where):
    """The inspector's top-k chart on the first token a person clicks: its box holds drawn bars (the README's
    inspector picture showed an empty placeholder). Gradio runs its 4.6 MB Plotly module only when a chart first
    shows; the page loads it ahead, while the reader looks at the recorded run (ui/preload.py)."""
    from visual.charts import CHOSEN

    size = SIZES[where][0]
    context, page = open_app(browser, app_url, size)
    page.wait_for_function("() => performance.getEntriesByType('resource').some((e) => /PlotlyPlot-/.test(e.name))")
    page.locator("#strip .el-tok.oov_blocked").nth(1).click()
    page.wait_for_function("() => (document.querySelector('#explanation')?.innerText || '').includes('gemma3')")
    plot = page.locator("#topk-plot")
    plot.scroll_into_view_if_needed()
    page.wait_for_function("() => document.querySelectorAll('#topk-plot .bars path').length > 0")
    page.wait_for_timeout(300)  # (the bars' drawing transition)
    shot = _pixels(page, plot)
    dark = [int(c) for c in CHOSEN[5:-1].split(",")[:3]]  # each panel's chosen or own-token bar
    bars = int((abs(shot - dark).max(axis=2) <= 30).sum())
    background = shot.reshape(-1, 3)
    painted = int((abs(background - background[0]).max(axis=1) > 24).sum())  # differs from the box's corner
    assert bars > 400 and painted > 0.05 * len(background), (bars, painted, len(background))
    context.close()


def test_emoji_are_drawn_in_colour_not_as_empty_boxes(browser, app_url):
    """The Tokenizers tab with emoji: each is painted by a colour emoji font (Debian's fonts-noto-color-emoji, which
    `make browser` installs; the page's font stacks end with the emoji fonts of the common systems), not as a box."""
    context, page = open_app(browser, app_url, SIZES["desktop"][0])
    page.get_by_role("tab", name="Tokenizers").click()
    page.locator("#tok-text textarea").fill("Sofia 😀 Plovdiv 🌞 ok")
    page.locator("#tok-button").click()
    page.wait_for_function("() => (document.querySelector('#tok-view')?.innerText || '').includes('🌞')")
    assert "Noto Color Emoji" in page.locator("#tok-view .el-grid-block").first.evaluate("e => getComputedStyle(e).fontFamily")
    for emoji in ("😀", "🌞"):
        box = page.evaluate("""(emoji) => {
          const block = document.querySelector('#tok-view .el-grid-block');
          const walker = document.createTreeWalker(block, NodeFilter.SHOW_TEXT);
          for (let node = walker.nextNode(); node; node = walker.nextNode()) {
            const at = node.data.indexOf(emoji);
            if (at < 0) continue;
            node.parentElement.scrollIntoView({block: 'center'});
            const range = document.createRange();
            range.setStart(node, at);
            range.setEnd(node, at + emoji.length);
            const r = range.getBoundingClientRect();
            return {x: r.left, y: r.top, width: r.width, height: r.height};
          }
          return null;
        }""", emoji)
        assert box and box["width"] > 4, (emoji, box)
        pixels = _pixels(page, box).reshape(-1, 3)
        warm = int(((pixels[:, 0] > 180) & (pixels[:, 1] > 120) & (pixels[:, 2] < 110)).sum())  # its yellow face
        assert warm > 0.15 * len(pixels), (emoji, warm, len(pixels))
    context.close()
