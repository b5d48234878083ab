"""The app in a real browser (Debian's Chromium through Playwright): what visitors see and click.

Screenshots land in the test's temporary folder; with ENSEMBLE_LENS_SCREENSHOTS=1 (``make screenshots``) they
replace the README's in assets/screenshots/."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.browser.watch import set_max_tokens
from tests.conftest import FIXTURES, ROOT

pytestmark = [pytest.mark.browser, pytest.mark.embedded]

SHOTS = ROOT / "assets" / "screenshots"  # the README's pictures
SCREENSHOTS_ENV = "ENSEMBLE_LENS_SCREENSHOTS"
SOFIA = "Sofia went to Plovdiv in 1999. Where did Sofia go, and when? Answer in one sentence that starts with her name."


@pytest.fixture
def shot(tmp_path):
    """Saves what the page shows: into assets/screenshots/ (the README's pictures) only when
    ``ENSEMBLE_LENS_SCREENSHOTS=1`` (``make screenshots``), else into the test's temporary folder, so that a test
    run leaves every tracked file as it was."""
    folder = SHOTS if os.environ.get(SCREENSHOTS_ENV) == "1" else tmp_path / "screenshots"

    def save(page, name: str) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(folder / f"{name}.png"), full_page=False)

    return save


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
        set_max_tokens(page, tokens)
        assert page.locator("#max-tokens input[type=range]").input_value() == str(tokens)
    page.locator("#run-button").click()


def wait_done(page) -> None:
    page.wait_for_function("() => /Done|Stopped/.test(document.querySelector('#status')?.innerText || '')")


def test_safe_run_shows_coloured_tokens_legend_and_inspector(page, shot):
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
    # the picture shows the top-k chart drawn (its box showed Gradio's empty placeholder while Plotly loaded)
    page.wait_for_function("() => document.querySelectorAll('#topk-plot .bars path').length > 0")
    page.wait_for_timeout(300)
    page.locator("#explanation").scroll_into_view_if_needed()
    shot(page, "inspector")


def test_tokenizer_tab_teaches_sofia(page, shot):
    page.get_by_role("tab", name="Tokenizers").click()
    page.locator("#tok-text textarea").fill("Sofia went to Plovdiv in 1999.")
    page.locator("#tok-button").click()
    page.wait_for_function("() => (document.querySelector('#tok-view')?.innerText || '').includes('%')")
    view = page.locator("#tok-view").inner_text()
    assert "Sofia" in view and "of" in view and "ia" in view
    shot(page, "tokenizers")
    page.locator("#tok-save").click()
    link = page.locator("#tok-html a").first
    link.wait_for()
    with page.expect_download() as download:
        link.click()
    saved = Path(download.value.path()).read_text(encoding="utf-8")
    assert saved.startswith("<!DOCTYPE html>") and "Sofia" in saved and "<script src" not in saved


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
    page.locator("#html-file a").first.wait_for()  # and the run as one offline page
    page.reload()
    page.get_by_role("tab", name="Trace").click()
    page.locator("#upload input[type=file]").set_input_files(str(saved))
    page.get_by_role("tab", name="Run").click()
    page.wait_for_function("() => (document.querySelector('#status')?.innerText || '').includes('Replaying')")
    # the status can arrive a moment before the strip is drawn (Gradio's "processing" overlay is still in its box)
    page.wait_for_function("(want) => document.querySelector('#strip')?.innerText === want", arg=strip_before, timeout=30_000)
    page.locator("#strip .el-tok").first.click()
    page.wait_for_function("() => (document.querySelector('#explanation')?.innerText || '').length > 10")


def test_stop_cancels_a_run_and_the_next_run_works(page):
    run(page, "Write a very long story about the river Maritsa.", "Single model", ["qwen"], tokens=400)
    # The first view's strip holds the recorded example: wait until the run itself is streaming its tokens.
    page.wait_for_function("() => (document.querySelector('#status')?.innerText || '').includes('Running single')")
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
    old = data["models"][0]
    text = json.dumps(data).replace(json.dumps(old), json.dumps("<img src=x onerror=window.__xss=4>"))  # everywhere
    path = tmp_path / "hostile.json"
    path.write_text(text)
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


def test_specem_rounds_timeline_heatmap_and_weights(page, shot):
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


def test_compare_tab_runs_methods_side_by_side(page, shot):
    page.get_by_role("tab", name="Compare").click()
    page.locator("#cmp-prompt textarea").fill("Sofia went to Plovdiv in 1999. Where did Sofia go?")
    page.locator("#cmp-tokens input[type=number]").fill("12")
    page.locator("#cmp-tokens input[type=number]").press("Enter")
    page.locator("#cmp-button").click()
    page.wait_for_function("() => /Running (unite|safe) \\(\\d of 2\\)/.test(document.querySelector('#cmp-status')?.innerText || '')")
    page.wait_for_function("() => document.querySelectorAll('#cmp-view .el-compare-card').length >= 2", timeout=300_000)
    page.wait_for_selector("#cmp-plot .js-plotly-plot")
    assert "safe" in page.locator("#cmp-table").inner_text().lower()
    page.wait_for_function("() => (document.querySelector('#cmp-status')?.innerText || '').startsWith('Done')")
    cards = page.locator("#cmp-view .el-compare-card")
    assert cards.nth(0).get_attribute("data-run") == "unite"
    cards.nth(1).locator(".el-tok").first.click()  # a card's token opens the same inspector
    page.wait_for_function("() => (document.querySelector('#cmp-inspect')?.innerText || '').includes('token #0')")
    assert page.locator("#cmp-inspect").inner_text().startswith("safe")
    page.locator("#cmp-html a").first.wait_for()  # the finished comparison as one offline page
    assert page.locator("#cmp-html").inner_text().strip().endswith(".html") or "compare-" in page.locator("#cmp-html").inner_text()
    shot(page, "compare")


# -- untrusted text as Markdown: no element, no request ---------------------------------------------------
ATTACKER = "attacker.invalid"
MARKDOWN = ("![t](http://attacker.invalid/img.png) [b](http://attacker.invalid/link) <img src=http://attacker.invalid/raw.png> "
            "http://attacker.invalid/auto www.attacker.invalid/www <http://attacker.invalid/angle> [r] ![r][r]\n\n"
            "[r]: http://attacker.invalid/ref")
FROM_ATTACKER = (f'[src*="{ATTACKER}"], [href*="{ATTACKER}"], [srcset*="{ATTACKER}"], [poster*="{ATTACKER}"], '
                 f'[style*="{ATTACKER}"], [data*="{ATTACKER}"]')


def _markdown_trace(tmp_path: Path, fixture: str) -> Path:
    """A fixture with Markdown image/link payloads in every field that reaches the page: model names (everywhere
    they appear), the text and a token, top-k and fusion keys, SpecEM candidates, settings, warnings, error."""
    data = json.loads((FIXTURES / f"{fixture}.json").read_text())
    names = {m: f"{m}![m{i}](http://{ATTACKER}/model{i}.png)" for i, m in enumerate(data["models"])}

    def walk(value):
        if isinstance(value, dict):
            return {names.get(k, k): walk(v) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v) for v in value]
        return names.get(value, value) if isinstance(value, str) else value

    data = walk(data)
    last = data["tokens"][-1]
    eos = data["tokens"].pop() if last["start"] == last["end"] else None
    start = len(data["text"])
    data["text"] += MARKDOWN
    data["tokens"].append(dict(last, index=len(data["tokens"]), text=MARKDOWN, start=start, end=len(data["text"]),
                               model=data["models"][0], details={}, fusion=None, topk=[[MARKDOWN, 0.9]]))
    if eos is not None:
        data["tokens"].append(dict(eos, index=len(data["tokens"]), start=len(data["text"]), end=len(data["text"])))
    for tok in data["tokens"]:
        if tok.get("topk"):
            tok["topk"][0][0] = MARKDOWN
        if tok.get("fusion"):
            tok["fusion"]["choice"] = MARKDOWN
            tok["fusion"]["before"][0][0] = MARKDOWN
    for rnd in data["rounds"]:
        for cand in rnd["candidates"]:
            cand["text"] = MARKDOWN
        rnd["accepted_text"] = MARKDOWN
    data["settings"]["drafter"] = MARKDOWN
    data["warnings"], data["error"], data["prompt"] = [MARKDOWN], MARKDOWN, MARKDOWN
    data["stats"]["stop_reason"] = MARKDOWN
    path = tmp_path / f"markdown-{fixture}.json"
    path.write_text(json.dumps(data))
    return path


def _assert_nothing_from_the_attacker(page, requests: list[str]) -> None:
    assert not [u for u in requests if ATTACKER in u], requests
    assert page.locator(FROM_ATTACKER).count() == 0
    html = page.evaluate("() => document.body.innerHTML")
    import re

    # innerHTML quotes every attribute value: an attribute pointing at the host would read ="http://attacker…
    bad = [html[max(0, m.start() - 120) : m.end() + 40] for m in re.finditer(f'="(https?:)?//{re.escape(ATTACKER)}', html)]
    assert not bad, bad


def test_markdown_payloads_create_no_element_and_no_request(page, tmp_path):
    requests: list[str] = []
    page.on("request", lambda request: requests.append(request.url))
    # 1. Uploaded traces: every view of the Run tab, the inspector on several tokens, SpecEM's rounds.
    for fixture in ("safe_math", "specem"):
        page.reload()  # a fresh upload box (it shows the previous file otherwise)
        page.wait_for_selector("#run-button")
        page.get_by_role("tab", name="Trace").click()
        page.locator("#upload input[type=file]").set_input_files(str(_markdown_trace(tmp_path, fixture)))
        page.get_by_role("tab", name="Run").click()
        page.wait_for_function("() => /Replaying|Could not/.test(document.querySelector('#status')?.innerText || '')")
        assert "Replaying" in page.locator("#status").inner_text(), page.locator("#status").inner_text()
        assert f"![m0](http://{ATTACKER}/model0.png)" in page.locator("#status").inner_text()  # shown as text
        tokens = page.locator("#strip .el-tok")
        for index in sorted({0, 3, tokens.count() - 2, tokens.count() - 1}):
            tokens.nth(index).click()
            page.wait_for_timeout(700)
        table = page.get_by_text("Per-token table").first
        if fixture == "safe_math":  # open it once: the table's cells hold the payloads too
            table.click()
            page.wait_for_selector("#token-table table")
        page.wait_for_timeout(500)
        _assert_nothing_from_the_attacker(page, requests)
    # 2. Model output: qwen asked to repeat the payload (strip, status, inspector, table).
    run(page, "Repeat this line exactly, character for character, and nothing else:\n" + MARKDOWN.split("\n")[0],
        "Single model", ["qwen"], tokens=48)
    wait_done(page)
    assert ATTACKER in page.locator("#strip").inner_text()
    page.locator("#strip .el-tok").nth(3).click()
    page.wait_for_timeout(700)
    # 3. SpecEM's drafts in the status line while the round's vote is pending.
    page.evaluate("""() => {
        window.__statuses = [];
        new MutationObserver(() => window.__statuses.push(document.querySelector('#status').innerText))
            .observe(document.querySelector('#status'), {subtree: true, childList: true, characterData: true});
    }""")
    run(page, "Output exactly this line: " + MARKDOWN.split("\n")[0], "SpecEM", ["qwen", "smollm2"], tokens=20)
    page.wait_for_function("() => window.__statuses.some((s) => s.includes('drafted'))")
    page.wait_for_function("() => /Done|Stopped|⚠️/.test(document.querySelector('#status')?.innerText || '')")
    assert "Done" in page.locator("#status").inner_text(), page.locator("#status").inner_text()
    # 4. The tokenizer tab with the payload as its text.
    page.get_by_role("tab", name="Tokenizers").click()
    before = page.locator("#tok-view").inner_text()
    page.locator("#tok-text textarea").fill(MARKDOWN)
    page.locator("#tok-button").click()
    page.wait_for_function("(before) => (document.querySelector('#tok-view')?.innerText || before) !== before", arg=before)
    page.wait_for_timeout(500)
    _assert_nothing_from_the_attacker(page, requests)


PAYLOAD_LINE = f"![a](http://{ATTACKER}/a.png) [b](http://{ATTACKER}/b)"


def _summary_csv(path: Path, method_cells: list[str], accuracy: str = "0.5") -> Path:
    """A summary.csv in the evaluation's columns, with an extra text column and header (ignored, never shown)."""
    import csv

    header = ["method", "n", "correct", "accuracy", "ci_low", "ci_high", "mean_et", "tokens_per_s", "s_per_question",
              "corruption_rate", "mean_tokens", "loop_rate", "budget_rate", f"note {PAYLOAD_LINE}"]
    with path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(header)
        for i, method in enumerate(method_cells):
            writer.writerow([method, 10, 5, accuracy, 0.2, 0.8, 1.0 + i, 3.5, 2.0 + i, 0, 20, 0.1, 0.2, MARKDOWN])
    return path


def test_markdown_payloads_in_compare_and_results_tabs(page, tmp_path):
    """The Compare tab (live model output repeating the payload, its cards, stats table and chart) and the
    Results tab (method names, model names and text cells of an uploaded summary.csv; a malformed one whose
    error message echoes a payload): no element points at the attacker and no request goes there."""
    requests: list[str] = []
    page.on("request", lambda request: requests.append(request.url))
    # 1. Compare: single and UniTE on qwen + smollm2, asked to output the payload.
    page.get_by_role("tab", name="Compare").click()
    page.locator("#cmp-prompt textarea").fill(f"Output exactly this line: {PAYLOAD_LINE}")
    column = page.locator("#cmp-tokens").locator("xpath=ancestor::div[.//label[contains(., 'Single model')]][1]")
    for label, want in [("Single model", True), ("UniTE (fuse every token)", True), ("SAFE (fuse only where safe)", False),
                        ("qwen", True), ("smollm2", True), ("gemma3", False)]:
        box = column.get_by_label(label, exact=True)
        if box.is_checked() != want:
            box.click()
    page.locator("#cmp-tokens input[type=number]").fill("32")
    page.locator("#cmp-tokens input[type=number]").press("Enter")
    page.locator("#cmp-button").click()
    page.wait_for_function("() => document.querySelectorAll('#cmp-view .el-compare-card').length >= 2", timeout=300_000)
    page.wait_for_selector("#cmp-plot .js-plotly-plot")
    assert ATTACKER in page.locator("#cmp-view").inner_text()  # the model repeated it: shown as text
    assert "single" in page.locator("#cmp-table").inner_text().lower()
    bars = page.locator("#cmp-plot .bars .point path")
    if bars.count():
        bars.first.hover(force=True)  # the hover box: escaped labels too
        page.wait_for_timeout(300)
    page.wait_for_timeout(500)
    _assert_nothing_from_the_attacker(page, requests)
    # 2. Results: payloads as method names (alone, with a model name, the long mixed line) and in a text cell.
    methods = [PAYLOAD_LINE, f"single:qwen![m](http://{ATTACKER}/m.png)", MARKDOWN.split("\n")[0], "<img src=x onerror=alert(1)>"]
    good = _summary_csv(tmp_path / "summary.csv", methods)
    bad = _summary_csv(tmp_path / "bad-summary.csv", ["safe"], accuracy=f"[b](http://{ATTACKER}/b)")
    for path, expect in ((good, "table"), (bad, ".el-error")):
        page.reload()  # a fresh upload box
        page.wait_for_selector("#run-button")
        page.get_by_role("tab", name="Results").click()
        page.locator("#results-file input[type=file]").set_input_files(str(path))
        page.wait_for_selector(f"#results-view {expect}")
        shown = page.locator("#results-view").inner_text()
        if expect == "table":
            assert PAYLOAD_LINE in shown and f"![m](http://{ATTACKER}/m.png)" in shown  # as text
            # the Results tab's own charts (the Run tab, hidden behind it, opens with its top-k chart drawn)
            page.wait_for_function("() => document.querySelectorAll('#results-scatter .js-plotly-plot, #results-bars .js-plotly-plot').length >= 2")
            points = page.locator("#results-bars .js-plotly-plot .bars .point path")
            if points.count():
                points.first.hover(force=True)
                page.wait_for_timeout(300)
        else:
            assert f"not '[b](http://{ATTACKER}/b)'" in shown, shown  # the error echoes the payload, as text
        page.wait_for_timeout(500)
        _assert_nothing_from_the_attacker(page, requests)


@pytest.mark.parametrize("phase", ["drafting", "verifying"])
def test_specem_stop_commits_nothing_after_the_click(page, phase):
    """Stop pressed while a SpecEM round is drafting or verifying: the strip holds exactly the tokens it held at the
    click (a round that finishes after it, or a view already on its way, adds nothing)."""
    run(page, "Write a long story about a journey from Sofia to Plovdiv.", "SpecEM", ["qwen", "smollm2", "gemma3"],
        tokens=300)
    page.wait_for_selector("#strip .el-tok")
    # Click Stop the moment the status says a later round is drafting (verifying), counting the strip in that instant.
    at_click = page.evaluate(
        """(phase) => new Promise((resolve) => {
            const check = () => {
                const status = document.querySelector('#status')?.innerText || '';
                const count = document.querySelectorAll('#strip .el-tok').length;
                if (count > 0 && new RegExp('Round [1-9]\\\\d*: .*' + phase).test(status)) {
                    document.querySelector('#stop-button').click();
                    resolve(count);
                } else {
                    setTimeout(check, 5);
                }
            };
            check();
        })""",
        phase,
    )
    page.wait_for_function("() => (document.querySelector('#status')?.innerText || '').includes('Stopped')")
    page.wait_for_timeout(1000)
    assert page.locator("#strip .el-tok").count() == at_click


def test_fork_from_a_selected_token_with_the_drafter_alone(page, shot):
    """What if: click a token of a SAFE run, fork with the drafter alone, see both continuations compared."""
    run(page, SOFIA, "SAFE", ["smollm2", "gemma3"], tokens=24)
    wait_done(page)
    page.locator("#fork-button").click()  # nothing selected yet: a message, not a run
    page.wait_for_function("() => (document.querySelector('#fork-view')?.innerText || '').includes('click a token first')")
    page.locator("#strip .el-tok").nth(4).click()
    page.wait_for_function("() => (document.querySelector('#explanation')?.innerText || '').length > 10")
    page.locator("#fork-method").get_by_label("The drafter alone").check()
    page.locator("#fork-button").click()
    page.wait_for_function("() => (document.querySelector('#fork-view')?.innerText || '').includes('Forked at token #4')",
                           timeout=120_000)
    view = page.locator("#fork-view").inner_text()
    assert "smollm2 alone" in view and "safe on smollm2, gemma3" in view
    assert page.locator("#fork-view .el-fork-side").count() == 2
    assert page.locator("#fork-view .el-fork-split").count() in (0, 2)  # marked on both sides when they part
    page.locator("#fork-view").scroll_into_view_if_needed()
    shot(page, "fork")
    run(page, "Say hello.", "Single model", ["smollm2"], tokens=4)  # a new run clears the fork of the old one
    # the status above the strip still reads the SAFE run's "Done" (a fork no longer writes there): wait for the new
    # run's own status before reading the fork view, which its first view empties
    page.wait_for_function("() => /by one model/.test(document.querySelector('#status')?.innerText || '') "
                           "&& /Done|Stopped/.test(document.querySelector('#status')?.innerText || '')", timeout=120_000)
    assert not page.locator("#fork-view").inner_text().strip()


def test_an_uploaded_trace_fills_the_form_and_a_refused_one_says_why_where_it_was_chosen(page, tmp_path):
    assert page.locator("#stop-button").is_disabled()  # nothing runs: Stop is off (it answers "Nothing is running" if forced)
    page.get_by_role("tab", name="Trace").click()
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema_version": 99}', encoding="utf-8")
    page.locator("#upload input[type=file]").set_input_files(str(bad))
    page.wait_for_function("() => (document.querySelector('#trace-status')?.innerText || '').includes('Could not load')")
    assert "schema_version" in page.locator("#trace-status").inner_text()
    assert "Could not load" not in page.locator("#status").inner_text()  # the Run tab is left as it was
    page.reload()
    page.get_by_role("tab", name="Trace").click()
    saved = json.loads((FIXTURES / "safe_math.json").read_text(encoding="utf-8"))
    page.locator("#upload input[type=file]").set_input_files(str(FIXTURES / "safe_math.json"))
    page.wait_for_function("() => (document.querySelector('#trace-status')?.innerText || '').includes('Loaded')")
    page.get_by_role("tab", name="Run").click()
    assert page.locator("#prompt textarea").input_value() == saved["prompt"]
    assert page.locator("#method").get_by_label("SAFE").is_checked()
    for name in ("qwen", "smollm2", "gemma3"):
        assert page.locator("#models").get_by_label(name, exact=True).is_checked()
    if not page.locator("#max-tokens input[type=range]").is_visible():
        page.get_by_text("Engine settings").click()
    page.wait_for_function("() => document.querySelector('#max-tokens input[type=range]')?.value === '64'")


def test_the_first_view_is_a_labelled_recording_with_examples_as_chips(page, shot):
    """Before anything runs: the first example is filled in and its recorded run fills every view."""
    page.wait_for_function("() => (document.querySelector('#status')?.innerText || '').includes('recorded run')")
    assert page.locator("#strip .el-tok").count() >= 5 and "Sofia" in page.locator("#strip").inner_text()
    assert page.locator("#prompt textarea").input_value().startswith("Sofia went to Plovdiv")
    assert "consensus" in page.locator("#legend").inner_text()
    # it opens on its lesson: the first blocked token selected and explained (tests/browser/test_browser_first.py)
    assert page.locator("#strip .el-selected.oov_blocked").count() == 1
    page.locator("#strip .el-tok.consensus").first.click()  # the recording is inspectable like a live run
    page.wait_for_function("() => document.querySelector('#strip .el-selected')?.classList.contains('consensus')")
    page.locator("#strip .el-tok.oov_blocked").first.click()
    page.wait_for_function("() => (document.querySelector('#explanation')?.innerText || '').includes('gemma3')")
    page.locator("#topk-plot").wait_for(state="visible")
    assert "tokenizer mismatch blocked" in page.locator("#charts-hint").inner_text()
    assert not page.locator("#fusion-plot").is_visible()  # nothing was fused: a sentence says so instead
    shot(page, "first-view")
    chip = page.locator("#examples").get_by_text("Code: a palindrome check (SpecEM)")
    assert chip.is_visible()
    chip.click()
    page.wait_for_function("() => (document.querySelector('#prompt textarea')?.value || '').includes('palindrome')")
    assert page.locator("#method").get_by_label("SpecEM").is_checked()
    assert page.locator("#examples").get_by_text("Names: Sofia in Plovdiv (SAFE)").is_visible()  # open for the next one
    assert not page.locator("#drafter").is_visible()  # SAFE's drafter box is SAFE's only
    page.locator("#method").get_by_label("SAFE").check()
    page.locator("#drafter").wait_for(state="visible")


def test_a_run_exported_as_one_html_file_works_offline(browser, tmp_path, embedded, shot):
    """generate --html: the file opens from disk with every request refused, and its inspector answers clicks."""
    import subprocess
    import sys

    out = tmp_path / "run.html"
    done = subprocess.run([sys.executable, "-m", "ensemble", "generate", "--method", "safe", "--models", "smollm2,gemma3",
                           "--prompt", SOFIA + " <img src=x onerror=alert(1)>", "--max-new-tokens", "20", "--html", str(out),
                           "--runtime", "transformers"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    context = browser.new_context(viewport={"width": 1024, "height": 768})
    page = context.new_page()
    requests = []
    page.route("**/*", lambda route: (requests.append(route.request.url), route.abort())
               if not route.request.url.startswith("file:") else route.continue_())
    dialogs = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.goto(out.as_uri())
    page.locator(".el-strip .el-tok").first.wait_for()
    page.locator(".el-strip .el-tok.oov_blocked").first.click()
    page.wait_for_function("() => (document.querySelector('#el-inspector')?.innerText || '').includes('gemma3')")
    assert "Sofia" in page.locator(".el-strip").inner_text() and "consensus" in page.locator(".el-legend").inner_text()
    assert not requests and not dialogs and page.locator("img").count() == 0
    shot(page, "export-html")
    context.close()


def test_links_restore_the_form_and_keys_step_through_tokens(page, app_url):
    """Copy link puts the form in the URL; opening it restores it; ←/→ and n/p move the selection; #t=N selects."""
    page.wait_for_function("() => (document.querySelector('#status')?.innerText || '').includes('recorded run')")
    page.locator("#strip .el-tok").first.click()
    page.wait_for_function("() => location.hash === '#t=0'")
    page.locator("body").press("ArrowRight")
    page.wait_for_function("() => location.hash === '#t=1'")
    page.locator("body").press("n")  # the next blocked or replaced token
    page.wait_for_function("() => document.querySelector('#strip .el-selected')?.matches('.oov_blocked, .ensembled_replaced')")
    picked = page.locator("#strip .el-selected").get_attribute("data-i")
    page.wait_for_function(f"() => (document.querySelector('#explanation')?.innerText || '').includes('token #{picked}')")
    for _ in range(5):  # quick presses: the explanation ends on the last token, not on one answered late
        page.locator("body").press("ArrowRight")
    last = int(picked) + 5
    page.wait_for_function(f"() => (document.querySelector('#explanation')?.innerText || '').includes('token #{last}')")
    page.wait_for_timeout(500)  # late answers to the earlier presses would land by now
    assert f"token #{last}" in page.locator("#explanation").inner_text()
    page.locator("#prompt textarea").fill("What is 6 * 7? <b>bold</b> & more")
    page.locator("#method").get_by_label("UniTE").check()
    set_models(page, ["qwen", "gemma3"])
    page.locator("#link-button").click()
    page.wait_for_function("() => (document.querySelector('#link-box textarea')?.value || '').includes('?tab=run')")
    link = page.locator("#link-box textarea").input_value()
    assert "prompt=What+is+6" in link and "method=unite" in link and "models=qwen%2Cgemma3" in link
    assert link.endswith("#t=") is False and "#t=" in link  # the selected token travels in the fragment
    page.goto(link.split("#")[0] + "&tab=tokenizers&text=Plovdiv+%F0%9F%87%A7%F0%9F%87%AC&lookahead=3&models=qwen,nobody")
    page.wait_for_function("() => (document.querySelector('#tok-text textarea')?.value || '').includes('Plovdiv')")
    page.wait_for_function("() => { const t = document.querySelector('#tok-view')?.innerText || '';"
                           " return t.includes('%') && !t.includes('1999'); }")  # the view is of the link's text
    page.get_by_role("tab", name="Run").click()
    assert page.locator("#prompt textarea").input_value() == "What is 6 * 7? <b>bold</b> & more"
    assert page.locator("#method").get_by_label("UniTE").is_checked()
    assert page.locator("#models").get_by_label("qwen", exact=True).is_checked()
    assert not page.locator("#models").get_by_label("gemma3", exact=True).is_checked()  # the later models= won
    assert "press Run" in page.locator("#status").inner_text() and not page.locator("#strip .el-tok").count()
    page.goto(app_url + "#t=3")  # a token link on the recorded run
    page.wait_for_function("() => document.querySelector('#strip .el-selected')?.dataset.i === '3'")


def test_a_fused_token_shows_paired_before_after_bars(page, shot):
    page.get_by_role("tab", name="Trace").click()
    page.locator("#upload input[type=file]").set_input_files(str(FIXTURES / "safe_math.json"))
    page.wait_for_function("() => (document.querySelector('#trace-status')?.innerText || '').includes('Loaded')")
    page.get_by_role("tab", name="Run").click()
    page.locator("#strip .el-tok.ensembled_replaced, #strip .el-tok.ensembled_kept").first.click()
    page.locator("#fusion-plot .js-plotly-plot").wait_for()
    assert "sharpening" in page.locator("#fusion-plot").inner_text()
    assert not page.locator("#charts-hint").inner_text().strip()  # a fused token needs no excuse
    page.locator("#fusion-plot").scroll_into_view_if_needed()
    shot(page, "fusion")


SIZES = [(390, 844), (1024, 768), (1366, 900)]
README_LAYOUTS = {((390, 844), "dark"), ((1024, 768), "light"), ((1366, 900), "dark")}  # the screenshots kept


@pytest.mark.parametrize(("size", "theme"), [(size, theme) for size in SIZES for theme in ("light", "dark")])
def test_layouts_fit_phones_projectors_and_desktops(browser, app_url, size, theme, shot):
    """The first view at a phone's, a projector's and a laptop's size, light and dark: nothing pushes the page
    sideways, every tab label is shown (none folded behind "…"), the top-k panels stack inside the screen, the
    aligned tokenizer view fits, and the projector switch makes the strip readable from the back of a room."""
    context = browser.new_context(viewport={"width": size[0], "height": size[1]})
    page = context.new_page()
    page.set_default_timeout(120_000)
    page.goto(app_url + f"?__theme={theme}")
    page.wait_for_function("() => (document.querySelector('#status')?.innerText || '').includes('recorded run')")
    assert page.evaluate("() => document.documentElement.scrollWidth <= window.innerWidth + 1"), "the page scrolls sideways"
    if theme == "dark":
        colour = page.evaluate("() => getComputedStyle(document.querySelector('#strip .el-tok')).color")
        r, g, b = (int(x) for x in colour[colour.index("(") + 1:colour.index(")")].split(",")[:3])
        assert (r + g + b) / 3 > 150, colour  # light text on the dark theme
    tabs = page.evaluate("() => [...document.querySelectorAll('[role=tab]')].filter(t => t.offsetParent).map(t => t.innerText)")
    assert tabs == ["Run", "Tokenizers", "Compare", "Trace", "Results"], tabs
    page.locator("#strip .el-tok.oov_blocked").first.click()
    page.wait_for_function("() => (document.querySelector('#explanation')?.innerText || '').includes('gemma3')")
    assert page.evaluate("() => document.documentElement.scrollWidth <= window.innerWidth + 1")
    page.locator("#strip .el-tok.consensus").nth(2).click()  # three models' top-k: one panel per model, stacked
    page.locator("#topk-plot .main-svg").first.wait_for()
    panels = page.evaluate("""() => [...document.querySelectorAll('#topk-plot .cartesianlayer .subplot')].map(p => {
        const r = p.getBoundingClientRect(); return [Math.round(r.left), Math.round(r.top), Math.round(r.right)]; })""")
    assert len(panels) == 3 and len({left for left, _, _ in panels}) == 1, panels  # one column
    assert max(right for _, _, right in panels) <= size[0], panels
    page.get_by_role("tab", name="Tokenizers").click()
    page.wait_for_function("() => (document.querySelector('#tok-view')?.innerText || '').includes('%')")
    blocks = page.evaluate("() => [...document.querySelectorAll('#tok-view .el-grid-block')].map(b => b.getBoundingClientRect().right)")
    assert blocks and max(blocks) <= size[0], blocks  # blocks wrap to the width instead of running off it
    assert page.evaluate("() => document.documentElement.scrollWidth <= window.innerWidth + 1")
    page.get_by_role("tab", name="Run").click()
    font = lambda: page.evaluate("() => parseFloat(getComputedStyle(document.querySelector('#strip .el-strip, #strip')).fontSize)")  # noqa: E731
    small = font()
    page.locator("#projector input").check()
    page.wait_for_function("() => document.querySelector('.gradio-container').classList.contains('el-large')")
    assert font() >= 28 > small
    page.locator("#strip").scroll_into_view_if_needed()
    if (size, theme) in README_LAYOUTS:
        shot(page, f"layout-{size[0]}x{size[1]}-{theme}")
    if size[0] < 600 and theme == "dark":  # the Compare stats table fits a phone (a run per column)
        page.get_by_role("tab", name="Compare").click()
        box = page.locator("#cmp-tokens input[type=number]")
        box.fill("8")
        box.press("Enter")
        page.locator("#cmp-button").click()
        page.wait_for_function("() => /Done/.test(document.querySelector('#cmp-status')?.innerText || '')")
        table = page.evaluate("""() => { const box = document.querySelector('#cmp-table').getBoundingClientRect();
            const t = document.querySelector('#cmp-table table').getBoundingClientRect(); return [box.right, t.right]; }""")
        assert table[1] <= table[0] + 1 <= size[0] + 1, table
        assert "safe" in page.locator("#cmp-table").inner_text() and "E/T" in page.locator("#cmp-table").inner_text()
    context.close()


# How wide the elements' content paints: from the element's left to the rightmost box of its texts and inline
# elements (a block inside spans its column whatever it holds).
PAINTED_WIDTH_JS = """(selectors) => Math.max(...selectors.map((sel) => {
  const root = document.querySelector(sel), left = root.getBoundingClientRect().left;
  let right = left;
  const walker = document.createTreeWalker(root, NodeFilter.SHOW_ELEMENT | NodeFilter.SHOW_TEXT);
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    let rects = [];
    if (n.nodeType === Node.TEXT_NODE) { const r = document.createRange(); r.selectNodeContents(n); rects = [...r.getClientRects()]; }
    else if (getComputedStyle(n).display.startsWith('inline')) rects = [...n.getClientRects()];
    rects.forEach((r) => { if (r.width > 0) right = Math.max(right, r.right); });
  }
  return right - left; }))"""


def _png(download):
    from PIL import Image

    path = Path(download.value.path())
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    return Image.open(path).convert("RGB")


def test_the_strip_and_the_aligned_view_save_as_png(page, shot):
    """The PNG is drawn in the browser from the page itself: the legend and the strip's decision colours, and the
    Tokenizers tab's view with token ids and byte boxes, as the screen shows them."""
    page.wait_for_function("() => (document.querySelector('#status')?.innerText || '').includes('recorded run')")
    width = page.evaluate(PAINTED_WIDTH_JS, ["#legend", "#strip"])
    with page.expect_download() as download:
        page.locator("#strip-png").click()
    assert download.value.suggested_filename == "ensemble-lens-strip.png"
    image = _png(download)
    assert image.width >= 2 * width  # twice the screen's resolution, all the strip paints
    colours = image.resize((image.width // 4, image.height // 4)).getcolors(maxcolors=1 << 16) or []
    assert len([c for n, c in colours if n > 20]) >= 4  # background, text and the decision colours
    page.get_by_role("tab", name="Tokenizers").click()
    page.wait_for_function("() => (document.querySelector('#tok-view')?.innerText || '').includes('%')")  # the load's view
    page.locator("#tok-text textarea").fill("東京は大きい。Sofia went to Plovdiv in 1999, and then to Varna by the sea.")
    page.locator("#tok-button").click()
    page.wait_for_function("() => (document.querySelector('#tok-view')?.innerText || '').includes('byte tokens')")
    assert page.locator("#tok-view .el-piece.el-byte").count() == 0
    page.locator("#tok-ids input").check()
    page.wait_for_function("() => document.querySelectorAll('#tok-view .el-piece.el-byte').length > 0")
    assert page.locator("#tok-view .el-id").count() >= page.locator("#tok-view .el-box").count() // 2
    tops = page.evaluate("() => [...document.querySelectorAll('#tok-view .el-grid-block')].map(b => Math.round(b.getBoundingClientRect().top))")
    assert len(tops) > len(set(tops)), "the blocks should share lines on a wide screen, not stack in one column"
    shot(page, "tokenizers-ids")
    with page.expect_download() as download:
        page.locator("#tok-png").click()
    image = _png(download)
    view = page.evaluate("() => document.querySelector('#tok-view').getBoundingClientRect()")
    assert image.width >= 2 * page.evaluate(PAINTED_WIDTH_JS, ["#tok-view"]) - 2 and image.height >= 2 * view["height"] - 2
