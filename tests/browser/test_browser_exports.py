"""Issue 39, item 5, in a real browser at a laptop's and a phone's size: what leaves the app (the exported page,
the PNG, the download names), where a fork's status goes, and the Compare cards side by side."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest

from tests.browser.test_browser import PAINTED_WIDTH_JS
from tests.browser.test_browser_paint import fixture_trace, inject
from tests.conftest import FIXTURES, app_page

pytestmark = [pytest.mark.browser, pytest.mark.embedded]

SIZES = {"laptop": (1366, 768), "phone": (390, 844)}
RECORDED = "() => (document.querySelector('#status')?.innerText || '').includes('recorded run')"


@pytest.fixture(params=list(SIZES))
def sized(request, browser, app_url):
    width, height = SIZES[request.param]
    with app_page(browser, app_url, width, height, timeout_ms=180_000) as page:
        page.wait_for_function(RECORDED)
        yield page


def _used_fonts(page, selector: str) -> list[str]:
    """The fonts the browser drew the text of ``selector``'s first element with, most glyphs first (what a
    person sees: a family the stylesheet names but the machine lacks is not among them)."""
    cdp = page.context.new_cdp_session(page)
    cdp.send("DOM.enable")
    cdp.send("CSS.enable")
    root = cdp.send("DOM.getDocument", {"depth": -1})["root"]["nodeId"]
    node = cdp.send("DOM.querySelector", {"nodeId": root, "selector": selector})["nodeId"]
    fonts = cdp.send("CSS.getPlatformFontsForNode", {"nodeId": node})["fonts"]
    cdp.detach()
    return [f"{f['familyName']} ({f.get('postScriptName', '')})" for f in sorted(fonts, key=lambda f: -f["glyphCount"])]


def _short_single_trace(tmp_path: Path) -> Path:
    """The single-model fixture cut to its first three tokens: a strip much narrower than the page, a phone's too."""
    data = json.loads((FIXTURES / "single.json").read_text())
    data["tokens"] = data["tokens"][:3]
    data["text"] = data["text"][: data["tokens"][-1]["end"]]
    data["stats"] = dict(data["stats"], generated_tokens=3)
    path = tmp_path / "short.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def _upload(page, path: Path) -> None:
    page.get_by_role("tab", name="Trace").click()
    page.locator("#upload input[type=file]").set_input_files(str(path))
    page.wait_for_function("() => (document.querySelector('#trace-status')?.innerText || '').includes('Loaded')")
    page.get_by_role("tab", name="Run").click()
    page.wait_for_function("() => (document.querySelector('#status')?.innerText || '').includes('Replaying')")


def test_the_exported_page_has_the_apps_font_and_readable_download_names(sized, tmp_path):
    """The exported page fell back to DejaVu while the app shows its own font, and the three download names were
    cut to "trace-s….json": the page is set in the app's font, each name shows whole and is short."""
    page = sized
    page.evaluate("async () => { await document.fonts.ready; }")
    app_font = _used_fonts(page, "#legend .el-legend-item > span:last-child")[0]
    page.get_by_role("tab", name="Trace").click()
    page.locator("#export-button").click()
    for box, ext in (("#json-file", "json"), ("#csv-file", "csv"), ("#html-file", "html")):
        page.locator(f"{box} a").first.wait_for()
        shown = page.locator(f"{box} .filename").first
        name = re.sub(r"\s+", "", shown.inner_text())
        assert re.fullmatch(rf"[a-z]+-[a-z]+-\d{{8}}-\d{{4}}\.{ext}", name), name
        cut = shown.evaluate("e => [...e.querySelectorAll('*')].some((c) => c.scrollWidth > c.clientWidth + 1)")
        visible = shown.evaluate("e => { const r = e.getBoundingClientRect(); return r.left >= 0 && r.right <= innerWidth + 1; }")
        assert not cut and visible, f"{box}: the name {name} is cut or off screen"
    with page.expect_download() as download:
        page.locator("#html-file a").first.click()
    saved = tmp_path / download.value.suggested_filename
    download.value.save_as(saved)
    exported = page.context.new_page()
    exported.goto(saved.as_uri())
    exported.evaluate("async () => { await document.fonts.ready; }")
    assert _used_fonts(exported, ".el-legend-item > span:last-child")[0] == app_font
    heading = _used_fonts(exported, "h1")[0]  # bold: the same family's other file
    assert "Montserrat" in heading and "Montserrat" in app_font and "DejaVu" not in heading
    exported.close()


def test_the_exported_inspector_comes_into_view_on_a_click(browser, app_url, tmp_path):
    """A long answer's page: the inspector sits under the strip, off screen; a click on a token brings it up."""
    import visual
    from ensemble.trace import RunTrace

    words = [" word", " and", " more", " words"] * 120
    trace = RunTrace.from_dict(fixture_trace(words))
    path = tmp_path / "long.html"
    path.write_text(visual.run_document(trace), encoding="utf-8")
    for width, height in SIZES.values():
        context = browser.new_context(viewport={"width": width, "height": height})
        page = context.new_page()
        page.goto(path.as_uri())
        assert page.evaluate("() => document.getElementById('el-inspector').getBoundingClientRect().top") > height
        page.locator(".el-strip .el-tok").nth(3).click()
        page.wait_for_function("() => { const r = document.getElementById('el-inspector').getBoundingClientRect();"
                               " return r.top >= 0 && r.top < innerHeight - 64; }", timeout=5_000)
        assert "#3" in page.locator("#el-inspector").inner_text()
        context.close()


def test_the_png_is_as_wide_as_what_it_shows(sized, tmp_path):
    """A short answer in a wide column: the picture was the column's width at 2x (2732 px) with its right half
    empty; it is now the legend's and the strip's painted width, with the 12 px frame."""
    from PIL import Image

    page = sized
    _upload(page, _short_single_trace(tmp_path))
    painted = page.evaluate(PAINTED_WIDTH_JS, ["#legend", "#strip"])
    column = page.evaluate("() => document.querySelector('#strip').getBoundingClientRect().width")
    page.mouse.move(0, 0)
    with page.expect_download() as download:
        page.locator("#strip-png").click()
    image = Image.open(io.BytesIO(Path(download.value.path()).read_bytes())).convert("RGB")
    assert painted < 0.75 * column  # the case at hand: a strip far narrower than its column
    # at 2x: the frame's 12 px a side, and right of the text at most the wrapper's padding its left side has too
    assert image.width <= 2 * (painted + 24 + 24), (image.width, painted, column)
    background = image.getpixel((1, 1))
    right = image.crop((int(image.width * 0.6), 0, image.width - 26, image.height))
    assert any(max(abs(a - b) for a, b in zip(px, background)) > 60 for px in right.getdata()), "the right part is empty"


def test_the_status_line_keeps_describing_the_strip_under_it_after_a_fork(sized):
    """The status after a fork said "Fork done …" above the original run's strip: it now stays the original's, and
    the fork's own line heads the fork's view."""
    page = sized
    # the status settles first (Gradio prefixes "processing" while the first view's own events are pending)
    page.wait_for_function("() => !/processing/.test(document.querySelector('#status')?.innerText || 'processing')")
    before = page.locator("#status").inner_text()
    tokens = page.locator("#strip .el-tok[data-i]")
    tokens.nth(tokens.count() - 3).click()
    page.wait_for_function("() => (document.querySelector('#explanation')?.innerText || '').length > 10")
    page.locator("#fork-method").get_by_label("The drafter alone").check()
    page.locator("#fork-button").click()
    page.wait_for_function("() => (document.querySelector('#fork-view')?.innerText || '').includes('Fork done')",
                           timeout=180_000)
    view = page.locator("#fork-view").inner_text()
    assert view.index("Fork done") < view.index("Forked at token")
    assert page.locator("#status").inner_text() == before and "Fork" not in before


def test_compare_cards_line_up_where_the_runs_part_and_name_identical_texts(sized):
    """The cards' legends differ in length (SAFE's six entries, a single model's one): their strips, and the bar
    where the runs part, start at one height in cards side by side; two runs with equal texts are called identical."""
    import visual
    from ensemble.trace import RunTrace

    page = sized
    safe = RunTrace.from_json((FIXTURES / "safe.json").read_bytes())
    twin = RunTrace.from_dict(safe.to_dict() | {"method": "gac"})
    single = RunTrace.from_json((FIXTURES / "single.json").read_bytes())
    inject(page, visual.compare_html({"single": single, "safe": safe, "gac": twin}))
    note = page.locator("#paint-probe > p").first.inner_text()
    assert "safe and gac wrote identical texts" in note, note
    assert page.locator("#paint-probe .el-compare-card[data-run=safe]").inner_text().count("identical to gac") == 1
    at = page.evaluate("""() => [...document.querySelectorAll('#paint-probe .el-compare-card')].map((card) => {
        const r = card.getBoundingClientRect(), strip = card.querySelector('.el-strip').getBoundingClientRect(),
              bar = card.querySelector('.el-fork-split').getBoundingClientRect();
        return {left: r.left, top: r.top, strip: strip.top, bar: bar.top}; })""")
    rows: dict[int, list[dict]] = {}
    for card in at:
        rows.setdefault(round(card["top"]), []).append(card)
    if SIZES["laptop"][0] == page.viewport_size["width"]:
        assert max(len(r) for r in rows.values()) >= 2, f"the cards should stand side by side on a laptop: {at}"
    for row in rows.values():
        assert max(c["strip"] for c in row) - min(c["strip"] for c in row) <= 1, f"strips start at different heights: {row}"
        assert max(c["bar"] for c in row) - min(c["bar"] for c in row) <= 1, f"the bars are at different heights: {row}"
