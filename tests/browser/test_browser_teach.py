"""Issue 28 in a real browser: a teacher's links (Tokenizers tab, projector mode, ids switch, a token that waits for
its run) and "What if it had chosen this?" from a top-k key, at a desktop's and a phone's size."""

from __future__ import annotations

import pytest

from tests.browser.test_browser import SOFIA, run, wait_done
from tests.conftest import app_page

pytestmark = [pytest.mark.browser, pytest.mark.embedded]

SIZES = {"desktop": (1366, 768), "phone": (390, 844)}


@pytest.fixture(params=list(SIZES))
def sized(request, browser, app_url):
    width, height = SIZES[request.param]
    with app_page(browser, app_url, width, height, timeout_ms=180_000) as page:
        yield page


def _in_view(page, selector: str) -> bool:
    return page.evaluate(f"""() => {{ const r = document.querySelector('{selector}')?.getBoundingClientRect();
        return !!r && r.width > 0 && r.left >= -1 && r.right <= window.innerWidth + 1; }}""")


def test_the_tokenizers_tab_copies_a_link_with_its_text_tokenizers_ids_and_projector_mode(sized, app_url):
    page = sized
    page.get_by_role("tab", name="Tokenizers").click()
    page.locator("#tok-text textarea").fill("Franz fuhr nach Frankfurt")
    page.locator("#tok-models").get_by_label("smollm2", exact=True).uncheck()
    page.locator("#tok-ids").get_by_role("checkbox").check()
    page.locator("#projector").get_by_role("checkbox").check()
    page.locator("#tok-link-button").click()
    page.wait_for_function("() => (document.querySelector('#tok-link-box textarea')?.value || '').includes('tab=tokenizers')")
    link = page.locator("#tok-link-box textarea").input_value()
    assert "text=Franz+fuhr" in link and "ids=true" in link and "large=true" in link and "smollm2" not in link
    page.goto("about:blank")
    page.goto(link)
    page.wait_for_function("() => (document.querySelector('#tok-text textarea')?.value || '') === 'Franz fuhr nach Frankfurt'")
    page.wait_for_function("() => (document.querySelector('#tok-view')?.innerText || '').includes('Frankfurt')")
    assert page.locator("#tok-ids").get_by_role("checkbox").is_checked()
    assert not page.locator("#tok-models").get_by_label("smollm2", exact=True).is_checked()
    page.wait_for_function("() => !!document.querySelector('.el-large')")  # projector mode is on
    assert page.locator("#tok-view .el-id").count() > 0  # the ids are drawn
    assert _in_view(page, "#tok-link-button")


def test_a_shared_token_waits_for_its_run(page, app_url):
    """A link with #t=3 for a prompt that is not the recording: the token is selected when the run is shown, even
    when the reader presses Run long after opening the link (it used to give up after ~20 s)."""
    page.goto(app_url + "?tab=run&prompt=Say+hello+to+Franz.&method=single&models=smollm2&max_new_tokens=6#t=3")
    page.wait_for_function("() => (document.querySelector('#status')?.innerText || '').includes('press Run')")
    page.wait_for_timeout(22_000)
    page.locator("#run-button").click()
    wait_done(page)
    page.wait_for_function("() => document.querySelector('#strip .el-selected')?.dataset.i === '3'")
    page.wait_for_function("() => (document.querySelector('#explanation')?.innerText || '').includes('token #3')")
    page.locator("#strip .el-tok").nth(1).click()  # the reader's own choice wins from then on
    page.wait_for_function("() => location.hash === '#t=1'")
    page.wait_for_timeout(1500)
    assert page.locator("#strip .el-selected").get_attribute("data-i") == "1"


def test_clicking_a_top_k_key_forks_with_it_forced(sized):
    page = sized
    run(page, SOFIA, "SAFE", ["smollm2", "gemma3"], tokens=12)
    wait_done(page)
    tokens = page.locator("#strip .el-tok[data-i]")
    at = tokens.count() - 3  # late in the answer: a short continuation
    tokens.nth(at).click()
    keys = page.locator("#whatif .el-whatif-key")
    keys.first.wait_for()
    assert _in_view(page, "#whatif .el-whatif-key")
    key = keys.first.get_attribute("data-key")
    chosen = page.locator("#strip .el-selected").inner_text()
    assert key and key != chosen
    keys.first.click()
    page.wait_for_function("() => (document.querySelector('#fork-view')?.innerText || '').includes('forced there')",
                           timeout=180_000)
    view = page.locator("#fork-view").inner_text()
    index = page.locator("#strip .el-selected").get_attribute("data-i")
    assert f"Forked at token #{index}" in view and "safe on smollm2, gemma3" in view
    assert page.locator("#fork-view .el-fork-side").count() == 2
    assert page.locator("#fork-view ins").count() >= 1  # the forced key is new text on the fork's side
    assert "(s)" not in view
