"""SAFE's drafts on the strip while they are checked (issue 37, Deliver 4), as the browser paints them: a drafted token
appears in the quiet "being checked" style (no fill, a dashed box), then its decision takes its place; a replaced draft
is drawn struck before the key that replaced it."""

from __future__ import annotations

import io

import pytest
from PIL import Image

from tests.browser.watch import SIZES, open_app, set_max_tokens

pytestmark = [pytest.mark.browser, pytest.mark.embedded, pytest.mark.slow]

PROMPT = "Name three colours of the rainbow."

# Gradio draws the strip afresh on every update, so a draft is named by its place among the strip's drafts (the strip
# only grows while the run streams).
VISIBLE_DRAFT = """() => [...document.querySelectorAll('#strip .el-draft')].findLastIndex(e =>
  getComputedStyle(e).display !== 'none' && e.textContent.trim().length > 1)"""
STILL_SHOWN = """(k) => { const d = document.querySelectorAll('#strip .el-draft')[k];
  return !!d && getComputedStyle(d).display !== 'none'; }"""
# The verified token that took draft k's place: the first token after it (drafts of its round skipped).
DECIDED = """(k) => { const d = document.querySelectorAll('#strip .el-draft')[k];
  if (!d || getComputedStyle(d).display !== 'none') return null;
  let e = d.nextElementSibling; while (e && !e.classList.contains('el-tok')) e = e.nextElementSibling;
  return e ? [e.dataset.i, e.className] : null; }"""
# A replaced token while drafts precede it: what its ::before paints (the struck draft) and how much wider it makes it.
SWAP = """() => { const t = [...document.querySelectorAll('#strip .el-draft ~ .el-tok.ensembled_replaced')].pop();
  if (!t) return null; const before = getComputedStyle(t, '::before'); const range = document.createRange();
  range.selectNodeContents(t); const text = [...range.getClientRects()].reduce((w, r) => w + r.width, 0);
  return {content: before.content, line: before.textDecorationLine, draft: t.dataset.draft,
          width: t.getBoundingClientRect().width, text, shown: t.innerText}; }"""


def shot(page, selector: str) -> Image.Image:
    return Image.open(io.BytesIO(page.locator(selector).screenshot(animations="disabled"))).convert("RGB")


def paper(pixel) -> bool:
    return min(pixel) >= 245  # the light theme's page, untinted


def interior(image: Image.Image) -> list:
    w, h = image.size
    return [image.getpixel((x, y)) for x in range(3, w - 3) for y in range(3, h - 3)]


def test_drafts_are_painted_being_checked_then_decided_and_a_replaced_one_swapped(browser, app_url, tmp_path):
    context, page = open_app(browser, app_url, SIZES["desktop"])
    try:
        page.locator("#prompt textarea").fill(PROMPT)
        page.locator("#method").get_by_label("SAFE (fuse only where safe)").check()
        for name in ("qwen", "smollm2", "gemma3"):  # the default ensemble
            box = page.locator("#models").get_by_label(name, exact=True)
            if box.is_checked() != (name != "gemma3"):
                box.click()
        set_max_tokens(page, 24)
        page.locator("#run-button").click()
        page.wait_for_function("() => document.querySelector('#legend').innerText.includes('being checked')")
        for _ in range(20):  # a draft seen before and after its screenshot was on screen in it
            k = page.wait_for_function(f"() => {{ const k = ({VISIBLE_DRAFT})(); return k >= 0 ? k : null; }}",
                                       polling=20).json_value()
            image = shot(page, f"#strip .el-draft >> nth={k}")
            if page.evaluate(STILL_SHOWN, k):
                break
        else:
            pytest.fail("no draft stayed on screen long enough for a screenshot")
        image.save(tmp_path / "draft.png")  # kept with the test's files, to look at when it fails
        pixels = interior(image)
        edge = max(([image.getpixel((x, y)) for x in range(image.size[0])] for y in range(3)),
                   key=lambda row: sum(min(p) < 200 for p in row))  # the top edge's darkest row
        assert sum(map(paper, pixels)) > 0.6 * len(pixels)  # no fill: the page shows through, unlike any decision
        dark = sum(min(p) < 200 for p in edge)
        assert 0.25 * len(edge) < dark < 0.8 * len(edge)  # a dashed line along its top: dashes and gaps
        index, classes = page.wait_for_function(DECIDED, arg=k, polling=20).json_value()
        assert classes.split()[1] in {"consensus", "oov_blocked", "ensembled_kept", "ensembled_replaced", "drafter"}
        final = interior(shot(page, f'#strip .el-tok[data-i="{index}"]'))
        assert sum(map(paper, final)) < 0.4 * len(final)  # its decision's tint fills it now
        swap = page.wait_for_function(SWAP, polling=20).json_value()
        assert swap["content"] == f'"{swap["draft"]}"' and swap["line"] == "line-through"
        assert swap["width"] > swap["text"] + 4  # the struck draft is painted before the key that replaced it
    finally:
        context.close()
