"""The Results tab's explorer in a real browser: open an evaluation folder (the fixture, uploaded as a .zip), filter
the question x method grid, click a cell and see that answer's strip in the Run tab; the tab's look at a laptop and
a phone size (screenshots of both in the test's temporary folder, to look at)."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from ensemble.evaluation.explorer import filter_questions, open_folder
from tests.conftest import ROOT

pytestmark = [pytest.mark.browser, pytest.mark.embedded]

FIXTURE = ROOT / "tests" / "fixtures" / "evaluation" / "gsm8k-3"


def _zip(tmp_path: Path) -> Path:
    archive = tmp_path / "gsm8k-3.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for path in FIXTURE.rglob("*"):
            if path.is_file():
                zf.write(path, Path("gsm8k-3") / path.relative_to(FIXTURE))
    return archive


def _pick(page, elem_id: str, label: str) -> None:
    page.locator(f"#{elem_id} input").click()
    page.locator("ul[role=listbox] li", has_text=label).first.click()


def test_filter_the_grid_click_a_cell_and_see_its_strip(page, tmp_path):
    folder = open_folder(FIXTURE)
    page.get_by_role("tab", name="Results").click()
    page.locator("#results-file input[type=file]").set_input_files(str(_zip(tmp_path)))
    page.wait_for_selector("#grid .el-cell")
    assert page.locator("#grid tbody tr").count() == 3
    rows = "rows => rows.map(r => parseInt(r.dataset.qid, 10))"
    expected = filter_questions(folder, "disagree")  # none: at 64 tokens every answer of the fixture is cut short
    _pick(page, "grid-filter", "questions where the methods disagree")
    page.wait_for_function(f"() => document.querySelectorAll('#grid tbody tr').length === {len(expected)}")
    assert page.locator("#grid tbody tr").evaluate_all(rows) == expected
    expected = filter_questions(folder, "all_wrong", sort="qid_desc")
    _pick(page, "grid-filter", "every method wrong")
    _pick(page, "grid-order", "question number, last first")
    page.wait_for_function(f"() => document.querySelector('#grid tbody tr')?.dataset.qid === '{expected[0]}'")
    assert page.locator("#grid tbody tr").evaluate_all(rows) == expected == [2, 1, 0]
    qid = expected[0]
    trace = folder.trace(qid, "safe-unite")
    page.locator(f'#grid .el-cell[data-qid="{qid}"][data-method="safe-unite"]').click()
    page.wait_for_function("() => document.querySelector('#status')?.innerText.includes('answer of the evaluation')")
    page.locator("#strip .el-tok").first.wait_for(state="visible")  # the Run tab is shown, with that answer's strip
    assert page.locator("#strip .el-tok").count() == len(trace.tokens)
    assert " ".join(page.locator("#strip").inner_text().split())[:20] != ""
    page.locator("#strip .el-tok").nth(1).click()  # the inspector explains its tokens, no model loaded
    page.wait_for_selector("#explanation .el-explain, #explanation p")


@pytest.mark.parametrize("size", [(1366, 768), (390, 844)], ids=["laptop", "phone"])
def test_results_tab_fits_its_width(browser, app_url, size, tmp_path):
    context = browser.new_context(viewport={"width": size[0], "height": size[1]})
    page = context.new_page()
    page.set_default_timeout(120_000)
    page.goto(app_url)
    page.wait_for_selector("#run-button")
    page.get_by_role("tab", name="Results").click()
    button = page.locator("#results-ours")
    assert "primary" in (button.get_attribute("class") or "")  # the clear, coloured button
    button.click()
    page.wait_for_selector("#results-view table")
    page.wait_for_selector("#grid .el-cell")
    width = page.evaluate("() => document.documentElement.scrollWidth")
    assert width <= size[0] + 1, f"the page scrolls sideways: {width} px at {size[0]} px"
    for box in ("#results-view", "#grid"):
        right = page.locator(box).evaluate("e => e.getBoundingClientRect().right")
        assert right <= size[0] + 1, f"{box} overflows: its right edge at {right} px"
    page.screenshot(path=str(tmp_path / f"results-{'phone' if size[0] < 600 else 'laptop'}.png"), full_page=True)
    context.close()


def test_the_projects_run_opens_from_the_button_and_a_lost_question_shows_its_tokens(page):
    """A Space visitor's path: the button opens the project's GSM8K run; a question the default ensemble lost where
    qwen alone was right opens as the ensemble's strip in the Run tab, no model loaded."""
    from ui.results import COMMITTED_RUN

    run, ensemble = open_folder(COMMITTED_RUN), "safe-unite@qwen+smollm2"
    qid = filter_questions(run, "single_right_ensemble_wrong", ensemble)[-1]  # the last: far down the grid
    page.locator("#strip .el-tok").nth(1).click()  # the first view's token explained...
    page.wait_for_function("() => (document.querySelector('#explanation')?.innerText || '').length > 10")
    page.get_by_role("tab", name="Results").click()
    page.locator("#results-ours").click()
    page.wait_for_function("() => document.querySelectorAll('#grid .el-cell').length === 240")
    cell = page.locator(f'#grid .el-cell[data-qid="{qid}"][data-method="{ensemble}"]')
    cell.scroll_into_view_if_needed()
    cell.click()
    page.wait_for_function("() => document.querySelector('#status')?.innerText.includes('answer of the evaluation')")
    page.locator("#strip .el-tok").first.wait_for(state="visible")
    trace = run.trace(qid, ensemble)
    assert page.locator("#strip .el-tok").count() == len(trace.tokens)
    # ...is gone with its strip; the form holds the question this strip answers; the strip's status is in sight
    assert page.locator("#explanation").inner_text().strip() == ""
    assert page.locator("#prompt textarea").input_value() == trace.prompt
    page.wait_for_function("() => { const r = document.querySelector('#status').getBoundingClientRect();"
                           " return r.top >= -2 && r.bottom <= window.innerHeight; }")


# Where a grid cell, its question's label and its method's header are, once the cell is scrolled into sight.
_CELL_IN_SIGHT_JS = """(cell) => {
  const row = cell.closest('tr'), table = cell.closest('table');
  const column = [...row.children].indexOf(cell);
  const label = row.children[0], head = table.querySelector('thead tr').children[column];
  const box = (e) => { const r = e.getBoundingClientRect(); return {left: r.left, right: r.right, top: r.top, bottom: r.bottom}; };
  return {cell: box(cell), label: box(label), head: box(head), height: innerHeight, width: innerWidth,
          head_text: head.innerText};
}"""


@pytest.mark.parametrize("size", [(1366, 768), (390, 844)], ids=["laptop", "phone"])
def test_the_grid_keeps_its_question_column_and_method_header_in_sight(browser, app_url, size, tmp_path):
    """Issue 39, item 4: on a phone the question text took ~300 px and the ✓/✗ cells were off-screen with no
    question column or method header in sight; the summary table was cut at "co…". Every cell, scrolled to, shows
    beside its question's label and under its method's header; a question's label opens to its whole text; every
    figure of the summary is on screen, none cut."""
    context = browser.new_context(viewport={"width": size[0], "height": size[1]})
    page = context.new_page()
    page.set_default_timeout(180_000)
    page.goto(app_url)
    page.wait_for_selector("#run-button")
    page.get_by_role("tab", name="Results").click()
    page.locator("#results-ours").click()
    page.wait_for_function("() => document.querySelectorAll('#grid .el-cell').length === 240")
    first_label = page.locator("#grid tbody tr").first.locator(":scope > *").first
    assert first_label.evaluate("e => e.getBoundingClientRect().width") <= 0.4 * size[0], "the question column is too wide"
    run = open_folder(ROOT / "docs" / "results" / "gsm8k-60-traced")
    last = run.question_ids[-1]
    for method, side in ((run.methods[-1], "scrollWidth"), (run.methods[0], "0")):  # the last row's far right, far left
        # as a reader does: the grid in sight, then down to its last row and across to the method's column
        page.locator("#grid table").evaluate(f"""t => {{ const box = t.parentElement; box.scrollIntoView({{block: 'start'}});
            box.scrollTop = box.scrollHeight; box.scrollLeft = {'box.scrollWidth' if side != '0' else '0'}; }}""")
        cell = page.locator(f'#grid .el-cell[data-qid="{last}"][data-method="{method}"]')
        cell.scroll_into_view_if_needed()  # (a grid without its own scrolling box: the page scrolls to it instead)
        page.wait_for_timeout(300)
        at = cell.evaluate(_CELL_IN_SIGHT_JS)
        c, label, head = at["cell"], at["label"], at["head"]
        assert c["top"] >= 0 and c["bottom"] <= at["height"] and c["left"] >= 0 and c["right"] <= at["width"], at
        assert label["left"] >= -1 and label["right"] <= c["left"] + 1, f"the question's label is not beside {method}'s cell: {at}"
        assert head["top"] >= -1 and head["bottom"] <= c["top"] + 1, f"{method}'s header is not in sight above its cell: {at}"
        assert method.split("@")[0] in " ".join(at["head_text"].split()).replace(" ", "")
    page.screenshot(path=str(tmp_path / f"grid-{size[0]}.png"))
    summary = page.locator("#grid tbody tr").first.locator("summary, details").first  # the label opens to the question
    summary.click()
    full = run.question(run.question_ids[0])
    page.wait_for_function("(want) => (document.querySelector('#grid tbody tr')?.innerText || '').replace(/\\s+/g, ' ')"
                           ".includes(want.replace(/\\s+/g, ' ').slice(-40))", arg=full)
    cut = page.evaluate("""() => [...document.querySelectorAll('#results-view td')].filter((td) => {
        const r = td.getBoundingClientRect(), box = td.closest('.el-table-scroll').getBoundingClientRect();
        return r.width === 0 || r.right > Math.min(innerWidth, box.right) + 1 || r.left < box.left - 1
          || td.scrollWidth > td.clientWidth + 1; }).map((td) => td.innerText)""")
    assert not cut, f"summary cells off screen or cut: {cut[:6]}"
    page.locator("#results-view").scroll_into_view_if_needed()
    page.screenshot(path=str(tmp_path / f"summary-{size[0]}.png"))
    page.wait_for_selector("#eval-stats table")  # the statistics follow the grid
    context.close()
