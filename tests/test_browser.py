"""The app in a real browser (Debian's Chromium through Playwright): what visitors see and click.

Screenshots land in assets/screenshots/ (the README shows them)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.embedded]

ROOT = Path(__file__).resolve().parents[1]
SHOTS = ROOT / "assets" / "screenshots"
FIXTURES = Path(__file__).parent / "fixtures"
SOFIA = "Sofia went to Plovdiv in 1999. Where did Sofia go, and when? Answer in one sentence that starts with her name."


def shot(page, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=False)


def set_models(page, models: list[str]) -> None:
    for name in ("qwen", "smollm2", "gemma3"):
        box = page.locator("#models").get_by_label(name, exact=True)
        if box.is_checked() != (name in models):
            box.click()


def run(page, prompt: str, method_label: str, models: list[str], tokens: int | None = None) -> None:
    page.locator("#prompt textarea").fill(prompt)
    page.locator("#method").get_by_label(method_label).check()
    set_models(page, models)
    if tokens is not None:
        box = page.locator("#max-tokens input[type=number]")
        if not box.is_visible():
            page.get_by_text("Engine settings").click()
            box.wait_for(state="visible")
        for _ in range(5):  # the accordion renders its sliders lazily: retry until the value sticks
            box.fill(str(tokens))
            box.press("Enter")
            page.wait_for_timeout(300)
            if page.locator("#max-tokens input[type=range]").input_value() == str(tokens):
                break
        assert page.locator("#max-tokens input[type=range]").input_value() == str(tokens)
    page.locator("#run-button").click()


def wait_done(page) -> None:
    page.wait_for_function("() => /Done|Stopped/.test(document.querySelector('#status')?.innerText || '')")


def test_safe_run_shows_coloured_tokens_legend_and_inspector(page):
    run(page, SOFIA, "SAFE", ["smollm2", "gemma3", "qwen"])
    page.wait_for_selector("#strip .el-tok")
    wait_done(page)
    tokens = page.locator("#strip .el-tok")
    assert tokens.count() >= 5
    assert "Sofia" in page.locator("#strip").inner_text()
    legend = page.locator("#legend").inner_text().lower()
    assert "consensus" in legend and "mismatch" in legend
    colours = {t.evaluate("e => getComputedStyle(e).backgroundColor") for t in tokens.all()[:12]}
    assert len(colours) >= 2  # decisions have different colours
    shot(page, "run-safe")
    blocked = page.locator("#strip .el-tok.oov_blocked").first
    blocked.click()
    page.wait_for_function("() => (document.querySelector('#explanation')?.innerText || '').includes('gemma3')")
    text = page.locator("#explanation").inner_text()
    assert "smollm2" in text and "gemma3" in text and "Sofia" in text
    assert page.locator("#tokenization").inner_text().strip()
    page.locator("#explanation").scroll_into_view_if_needed()
    shot(page, "inspector")


def test_tokenizer_tab_teaches_sofia(page):
    page.get_by_role("tab", name="Tokenizers").click()
    page.locator("#tok-text textarea").fill("Sofia went to Plovdiv in 1999.")
    page.locator("#tok-button").click()
    page.wait_for_function("() => (document.querySelector('#tok-view')?.innerText || '').includes('%')")
    view = page.locator("#tok-view").inner_text()
    assert "Sofia" in view and "of" in view and "ia" in view
    shot(page, "tokenizers")


def test_export_and_reimport_a_trace(page, tmp_path):
    run(page, "Say hello to Plovdiv.", "Single model", ["smollm2"], tokens=12)
    wait_done(page)
    strip_before = page.locator("#strip").inner_text()
    page.get_by_role("tab", name="Trace").click()
    page.locator("#export-button").click()
    link = page.locator("#json-file a").first
    link.wait_for()
    with page.expect_download() as download:
        link.click()
    saved = tmp_path / "trace.json"
    download.value.save_as(saved)
    data = json.loads(saved.read_text())
    assert data["method"] == "single" and data["models"] == ["smollm2"]
    page.reload()
    page.get_by_role("tab", name="Trace").click()
    page.locator("#upload input[type=file]").set_input_files(str(saved))
    page.get_by_role("tab", name="Run").click()
    page.wait_for_function("() => (document.querySelector('#status')?.innerText || '').includes('Replaying')")
    assert page.locator("#strip").inner_text() == strip_before
    page.locator("#strip .el-tok").first.click()
    page.wait_for_function("() => (document.querySelector('#explanation')?.innerText || '').length > 10")


def test_stop_cancels_a_run_and_the_next_run_works(page):
    run(page, "Write a very long story about the river Maritsa.", "Single model", ["qwen"], tokens=400)
    page.wait_for_selector("#strip .el-tok")
    page.locator("#stop-button").click()
    page.wait_for_function("() => (document.querySelector('#status')?.innerText || '').includes('Stopped')")
    stopped = page.locator("#strip .el-tok").count()
    assert 0 < stopped < 400
    run(page, "Say hi.", "Single model", ["smollm2"], tokens=6)
    page.wait_for_function("() => (document.querySelector('#status')?.innerText || '').includes('Done')")
    assert page.locator("#strip .el-tok").count() <= 7


def _hostile_trace(tmp_path: Path) -> Path:
    data = json.loads((FIXTURES / "safe.json").read_text())
    evil = '<script>window.__xss=1</script><img src=x onerror="window.__xss=2">${window.__xss=3}`x`{{7*7}}'
    start = len(data["text"])
    data["text"] += evil
    data["tokens"].append(dict(data["tokens"][0], index=len(data["tokens"]), text=evil, start=start, end=len(data["text"]),
                               decision="consensus", fusion=None))
    data["models"][0] = "<img src=x onerror=window.__xss=4>"
    path = tmp_path / "hostile.json"
    path.write_text(json.dumps(data))
    return path


def test_untrusted_content_never_runs(page, tmp_path):
    dialogs = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    # Generated content: the models repeat a hostile line verbatim.
    line = '<script>window.__xss=1</script><img src=x onerror="window.__xss=2">${window.__xss=3} `whoami`'
    run(page, "Repeat the following line exactly, character for character, and nothing else:\n" + line,
        "Single model", ["qwen"], tokens=60)
    wait_done(page)
    assert "<script>window.__xss=1</script>" in page.locator("#strip").inner_text().replace("·", " ")
    page.locator("#strip .el-tok").first.click()
    page.wait_for_timeout(500)
    # Uploaded content: a trace whose text, tokens and model names carry payloads.
    page.get_by_role("tab", name="Trace").click()
    page.locator("#upload input[type=file]").set_input_files(str(_hostile_trace(tmp_path)))
    page.get_by_role("tab", name="Run").click()
    page.wait_for_function("() => (document.querySelector('#status')?.innerText || '').includes('Replaying')")
    page.locator("#strip .el-tok").last.click()
    page.wait_for_timeout(1000)
    assert page.evaluate("() => window.__xss") is None
    assert not dialogs
    assert page.locator("#strip script, #strip img, #legend img, #explanation img, #status img").count() == 0
    assert "<img src=x onerror=window.__xss=4>" in page.locator("#status").inner_text()
    assert "${window.__xss=3}" in page.locator("#strip").inner_text()


def test_specem_rounds_timeline_heatmap_and_weights(page):
    run(page, "Natalia sold clips to 48 of her friends in April, and then she sold half as many in May. How many in total?",
        "SpecEM", ["qwen", "smollm2", "gemma3"], tokens=24)
    wait_done(page)
    assert "24 tokens" in page.locator("#stats").inner_text() or page.locator("#strip .el-tok").count() <= 25
    page.wait_for_selector("#rounds .el-round")
    assert page.locator("#rounds .el-round").count() >= 2
    assert page.locator("#rounds .el-cand.winner").count() >= 2
    page.wait_for_selector("#heatmap .js-plotly-plot")
    page.wait_for_selector("#weights .js-plotly-plot")
    assert page.locator("#weights .scatterlayer .trace").count() == 3  # one line per model
    page.locator("#rounds").scroll_into_view_if_needed()
    shot(page, "specem")


def test_compare_tab_runs_methods_side_by_side(page):
    page.get_by_role("tab", name="Compare").click()
    page.locator("#cmp-prompt textarea").fill("Sofia went to Plovdiv in 1999. Where did Sofia go?")
    page.locator("#cmp-tokens input[type=number]").fill("12")
    page.locator("#cmp-tokens input[type=number]").press("Enter")
    page.locator("#cmp-button").click()
    page.wait_for_function("() => document.querySelectorAll('#cmp-view .el-compare-card').length >= 2", timeout=300_000)
    page.wait_for_selector("#cmp-plot .js-plotly-plot")
    assert "safe" in page.locator("#cmp-table").inner_text().lower()
    shot(page, "compare")
