"""Issue 38 in a real browser: from a lost cell of the grid to the decision that lost it in two clicks ("find the
decision" on the cell, then "Open token #N"), the token selected in the Run tab's strip and inspector and the
counterfactual answer in the fork view; a cell says its question, answer and gold, and a click fills the pair view."""

from __future__ import annotations

import json
import shutil
import zipfile
from pathlib import Path

import pytest

from ensemble.evaluation.blame_store import run_batch
from ensemble.evaluation.explorer import open_folder
from tests.ensemble.evaluation.test_blame import FIXTURE, scripted

pytestmark = [pytest.mark.browser, pytest.mark.embedded]


def _lost_zip(tmp_path: Path) -> Path:
    """The fixture with qwen alone right on question 0, its attribution recorded (token #44 decisive), zipped."""
    folder = tmp_path / "gsm8k-3"
    shutil.copytree(FIXTURE, folder)
    rows = [json.loads(line) for line in (folder / "rows.jsonl").read_text().splitlines()]
    for row in rows:
        if (row["qid"], row["method"]) == (0, "single:qwen"):
            row.update(prediction="71", correct=True)
    (folder / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    run_batch(open_folder(folder), ["safe-unite"], None, scripted(flip_at=44), say=lambda line: None)
    archive = tmp_path / "gsm8k-3.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for path in folder.rglob("*"):
            if path.is_file() and not path.name.startswith("."):
                zf.write(path, Path("gsm8k-3") / path.relative_to(folder))
    return archive


def test_from_a_lost_cell_to_its_decisive_token_in_two_clicks(page, tmp_path):
    page.get_by_role("tab", name="Results").click()
    page.locator("#results-file input[type=file]").set_input_files(str(_lost_zip(tmp_path)))
    cell = page.locator('#grid .el-cell[data-qid="0"][data-method="safe-unite"]')
    cell.wait_for()
    text = " ".join(cell.inner_text().split())
    assert text.startswith("✗ 3") and "#0 · gold 71" in text  # the answer given, the question and the gold
    cell.locator(".el-blame").click()  # click 1
    page.wait_for_selector("#blame-view [data-open-token]")
    assert "the decisive decision is token #44, a sharpening swap" in page.locator("#blame-view").inner_text()
    assert page.locator("#part-qid input").input_value() == "0"  # the pair view took the grid's question
    page.locator("#blame-view").screenshot(path=str(tmp_path / "blame-view.png"))  # to look at
    page.locator("#blame-view [data-open-token]").click()  # click 2
    page.wait_for_selector('#strip .el-tok.el-selected[data-i="44"]')
    page.wait_for_function("() => (document.querySelector('#explanation')?.innerText || '').length > 10")
    fork = page.locator("#fork-view").inner_text()
    assert "it answers 71 (right)" in fork and "The answer is 71." in fork
    page.screenshot(path=str(tmp_path / "blame-run-tab.png"), full_page=True)
    status = page.locator("#status").inner_text()
    assert "Question 0, safe-unite: answered 3, gold 71 (wrong)" in status
