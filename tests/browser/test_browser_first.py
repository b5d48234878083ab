"""A first visit and a new run, at a laptop's (1366x768) and a phone's (390x844) size: the first screen opens on the
recording's lesson (its first blocked token selected and explained, no click needed), and a new run starts with
nothing of the previous one under its strip (checked on every frame while it streams, ``tests.browser.watch``)."""

from __future__ import annotations

import pytest

from tests.browser.watch import SIZES, STREAMING, open_app, samples, start_run

pytestmark = [pytest.mark.browser, pytest.mark.embedded]


@pytest.mark.parametrize("where", list(SIZES))
def test_the_first_screen_opens_on_the_first_blocked_token_explained(browser, app_url, where):
    """Without a click, the first screen shows why the ensemble refused to fuse: the recording's first blocked token
    selected (drawn with the selection ring) and its explanation, in view, with the tokenization rows under it."""
    context, page = open_app(browser, app_url, SIZES[where])
    page.wait_for_function("() => (document.querySelector('#explanation')?.innerText || '').includes('blocked')",
                           timeout=10_000)  # the same update as the recording's strip: nothing to click or wait for
    selected = page.locator("#strip .el-selected")
    assert selected.count() == 1 and "oov_blocked" in selected.get_attribute("class").split()
    first_blocked = page.locator("#strip .el-tok.oov_blocked").first.get_attribute("data-i")
    assert selected.get_attribute("data-i") == first_blocked
    text = page.locator("#explanation").inner_text()
    assert f"token #{first_blocked}" in text and "gemma3" in text
    assert page.locator("#tokenization").inner_text().strip()
    assert page.evaluate("() => window.scrollY") == 0
    # the explanation's first lines are in the first screen, beside (laptop) or under (phone) the strip
    top = page.evaluate("() => document.getElementById('explanation').getBoundingClientRect().top")
    assert 0 < top < SIZES[where][1] - 60, top
    assert "recorded latency" in page.locator("#stats").inner_text()  # and its timings are not passed off as live
    # a click on another token moves the selection, as always
    page.locator("#strip .el-tok.consensus").first.click()
    page.wait_for_function("() => document.querySelectorAll('#strip .el-selected').length === 1 && "
                           "document.querySelector('#strip .el-selected').classList.contains('consensus')")
    context.close()


@pytest.mark.parametrize("where", list(SIZES))
def test_a_new_run_shows_nothing_of_the_previous_one_while_it_streams(browser, app_url, where):
    """Issue 39, item 1: the explanation, tokenization rows, charts and stats of the previous run's token stayed
    under a new run's strip while it streamed. From the click on Run to the end of the new run, nothing of the
    previous run is on the page: checked on every frame, from the first new token until the run has drawn 12."""
    context, page = open_app(browser, app_url, SIZES[where])
    last = page.locator("#strip .el-tok").last  # the recording's end token, as in the report
    last.click()
    page.wait_for_function("(i) => (document.querySelector('#explanation')?.innerText || '').includes('token #' + i)",
                           arg=last.get_attribute("data-i"))
    page.locator("#topk-plot").wait_for(state="visible")
    start_run(page, "Write a long story about the river Maritsa.")
    page.wait_for_function(f"() => window.__samples.filter({STREAMING}).some((s) => s.tokens >= 12) || "
                           "/Done|Stopped/.test(document.querySelector('#status')?.innerText || '')")
    page.wait_for_timeout(1500)  # a late answer of the old page state (a re-selected token) would land by now
    page.evaluate("() => document.querySelector('#stop-button').click()")
    page.wait_for_function("() => /Done|Stopped/.test(document.querySelector('#status')?.innerText || '')")
    streaming = [s for s in samples(page) if s["status"].startswith("Running ") and s["tokens"] > 0]
    assert len(streaming) > 5 and max(s["tokens"] for s in streaming) >= 12
    stale = [s for s in streaming if s["explanation"] or s["tokenization"] or s["charts"] or s["stats"] or s["selected"]]
    assert not stale, f"the previous run's state under the new strip: {stale[0]}"
    context.close()
