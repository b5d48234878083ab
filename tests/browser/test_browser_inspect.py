"""What a person sees of issue 39's smaller findings, measured at a laptop's (1366x768) and a phone's (390x844) size:
a replaced token painted in the inspector's response row (its draft struck through, no stray box); a selection ring
that covers no letter, and a hover that differs from it; SpecEM's model colours apart from every decision colour; top-k
keys outside a model's top k that do not read as 0%; plain words before jargon on the first screen; a Stop button
that is off while nothing runs; and examples that stay open for the next one."""

from __future__ import annotations

import re

import pytest

from tests.browser.watch import SIZES, open_app
from tests.conftest import FIXTURES
from tests.ui.test_wording import _outside_brackets
from tests.visual.helpers import delta_e

pytestmark = [pytest.mark.browser, pytest.mark.embedded]


def upload(page, name: str) -> None:
    page.get_by_role("tab", name="Trace").click()
    page.locator("#upload input[type=file]").set_input_files(str(FIXTURES / f"{name}.json"))
    page.wait_for_function("() => (document.querySelector('#trace-status')?.innerText || '').includes('Loaded')")
    page.get_by_role("tab", name="Run").click()
    page.wait_for_function("() => (document.querySelector('#status')?.innerText || '').includes('Replaying')")
    page.wait_for_function("() => document.querySelectorAll('#strip .el-tok').length > 10")


def click_token(page, index: int, expect: str) -> None:
    page.locator(f'#strip .el-tok[data-i="{index}"]').click()
    page.wait_for_function("(want) => (document.querySelector('#explanation')?.innerText || '').includes(want)",
                           arg=f"token #{index}")
    page.wait_for_function("(want) => (document.querySelector('#tokenization')?.innerText || '').includes(want)", arg=expect)


# The response row of the inspector's grid (its label reads "response"): each box, its painted characters, and
# whether the text row's cell above it is struck through.
RESPONSE_JS = """() => {
  const out = [];
  for (const block of document.querySelectorAll('#tokenization .el-grid-block')) {
    const label = [...block.querySelectorAll('.el-grid-label')].find((l) => l.textContent === 'response');
    if (!label) continue;
    const row = label.style.gridRow;
    for (const box of block.querySelectorAll('.el-box')) {
      if (box.style.gridRow !== row) continue;
      box.scrollIntoView({block: 'center', inline: 'nearest'});
      const r = box.getBoundingClientRect();
      const glyphs = [];
      const walker = document.createTreeWalker(box, NodeFilter.SHOW_TEXT);
      for (let node = walker.nextNode(); node; node = walker.nextNode()) {
        for (let i = 0; i < node.data.length; i++) {
          const range = document.createRange();
          range.setStart(node, i);
          range.setEnd(node, i + 1);
          const g = range.getBoundingClientRect();
          glyphs.push({char: node.data[i], inside: g.width >= 1 && g.left >= r.left - 0.5 && g.right <= r.right + 0.5,
                       shown: g.top < innerHeight && g.bottom > 0 && g.left < innerWidth && g.right > 0});
        }
      }
      out.push({text: box.textContent, cls: box.className, left: r.left, glyphs});
    }
  }
  const struck = [...document.querySelectorAll('#tokenization .el-axis')]
    .filter((a) => getComputedStyle(a).textDecorationLine.includes('line-through')).map((a) => a.textContent);
  return {boxes: out, struck};
}"""


@pytest.mark.parametrize("where", list(SIZES))
def test_a_replaced_token_is_painted_in_the_response_row(browser, app_url, where):
    """Issue 39 item 2: "." replaced the draft " and" (token #27 of the math fixture); the response row was empty there.
    Now "." is painted in the row, in its own box, on screen; the draft the models checked is struck through; and no
    response token after the replacement sits under the draft (token #43: " " replaced " Natal")."""
    context, page = open_app(browser, app_url, SIZES[where])
    upload(page, "safe_math")
    for index, text, draft in ((27, ".", ["·and", "·then"]), (43, "·", ["·Natal", "ia", "·sold"]), (18, "·calculate", ["·follow", "·these"])):
        click_token(page, index, "response")
        seen = page.evaluate(RESPONSE_JS)
        current = [b for b in seen["boxes"] if "el-current" in b["cls"]]
        assert [b["text"] for b in current] == [text], (index, seen["boxes"])
        glyphs = current[0]["glyphs"]
        assert glyphs and all(g["inside"] and g["shown"] for g in glyphs), (index, glyphs)
        later = [b["text"] for b in seen["boxes"] if "unknown" not in b["cls"] and b["left"] > current[0]["left"]]
        assert not later, (index, later)  # no stray box of the response under the discarded draft
        assert seen["struck"] == draft, (index, seen["struck"])
    context.close()


# Every character of the strip (a DOM Range each) against the selected token's ring: the band between its border box
# grown by outline-offset and that grown by offset + width, on each of the token's line boxes.
RING_JS = """(index) => {
  const token = document.querySelector(`#strip .el-tok[data-i="${index}"]`);
  const style = getComputedStyle(token);
  const offset = parseFloat(style.outlineOffset) || 0, width = style.outlineStyle === 'none' ? 0 : parseFloat(style.outlineWidth);
  const rings = [...token.getClientRects()].map((b) => ({
    inner: [b.left - offset, b.top - offset, b.right + offset, b.bottom + offset],
    outer: [b.left - offset - width, b.top - offset - width, b.right + offset + width, b.bottom + offset + width]}));
  const overlap = (a, b) => Math.min(a[2], b[2]) - Math.max(a[0], b[0]) > 0.25 && Math.min(a[3], b[3]) - Math.max(a[1], b[1]) > 0.25;
  const inside = (a, b) => a[0] >= b[0] - 0.25 && a[1] >= b[1] - 0.25 && a[2] <= b[2] + 0.25 && a[3] <= b[3] + 0.25;
  const covered = [];
  let checked = 0;
  for (const tok of document.querySelectorAll('#strip .el-tok')) {
    const walker = document.createTreeWalker(tok, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      for (let i = 0; i < node.data.length; i++) {
        if (!node.data[i].trim()) continue;
        const range = document.createRange();
        range.setStart(node, i);
        range.setEnd(node, i + 1);
        const r = range.getBoundingClientRect();
        if (r.width < 1) continue;
        checked += 1;
        const box = [r.left, r.top + r.height * 0.2, r.right, r.bottom - r.height * 0.2];  // the glyph's ink band
        if (width > 0 && rings.some((g) => overlap(box, g.outer) && !inside(box, g.inner)))
          covered.push(`${tok.dataset.i}:${node.data[i]}`);
      }
    }
  }
  return {checked, covered, width, offset};
}"""


@pytest.mark.parametrize("where", list(SIZES))
def test_the_selection_ring_covers_no_letter_and_hover_is_not_selection(browser, app_url, where):
    """Issue 39: the ring of the selected token (S|of|ia's "of", #1) covered the letters at its edges, and hover drew
    the same ring. Measured: no character's painted box meets the ring's band; a hovered token draws no ring but a
    darker tint, so hover and selection never look alike."""
    context, page = open_app(browser, app_url, SIZES[where])
    for index in (1, 2, 6):
        page.locator(f'#strip .el-tok[data-i="{index}"]').click()
        page.wait_for_function("(want) => (document.querySelector('#explanation')?.innerText || '').includes(want)",
                               arg=f"token #{index}")
        page.mouse.move(0, 0)
        page.wait_for_timeout(200)
        seen = page.evaluate(RING_JS, index)
        assert seen["width"] >= 2 and seen["checked"] >= 15, seen  # a ring is drawn
        assert not seen["covered"], seen
    selected = page.locator('#strip .el-tok[data-i="6"]')
    other = page.locator('#strip .el-tok[data-i="3"]')
    resting = other.evaluate("(t) => getComputedStyle(t).backgroundImage")
    other.hover()
    page.wait_for_timeout(200)
    hovered = other.evaluate("(t) => [getComputedStyle(t).outlineStyle, getComputedStyle(t).backgroundImage]")
    ring = selected.evaluate("(t) => getComputedStyle(t).outlineStyle")
    assert ring != "none" and hovered[0] == "none", (ring, hovered)  # only the selection has a ring
    assert hovered[1] != resting, (hovered, resting)  # the hover shows, as a darker tint
    context.close()


COLOURS_JS = """(classes) => {
  const probe = document.createElement('div');
  document.querySelector('#strip').appendChild(probe);
  const out = {};
  for (const cls of classes) {
    const span = document.createElement('span');
    span.className = 'el-tok ' + cls;
    span.textContent = 'Ab';
    probe.appendChild(span);
    const s = getComputedStyle(span);
    out[cls] = [s.backgroundColor, s.borderBottomColor];
  }
  probe.remove();
  return out;
}"""


def _rgba(text: str) -> tuple[float, float, float, float]:
    values = [float(v) for v in re.findall(r"[\d.]+", text)]
    return (*values[:3], values[3] if len(values) > 3 else 1.0)


def _over_white(colour: str) -> tuple[float, ...]:
    r, g, b, a = _rgba(colour)
    return tuple(a * c + (1 - a) * 255 for c in (r, g, b))


@pytest.mark.parametrize("where", list(SIZES))
def test_specem_segments_wear_model_colours_apart_from_every_decision_colour(browser, app_url, where):
    """Issue 39: SpecEM painted smollm2's segments in the blocked colour. The painted tint and underline of every
    SpecEM token differ from each decision's (as this page paints them) by more than the closest two decisions' tints
    differ from each other, and the legend says that these colours name models."""
    from visual.style import DECISION_STYLE

    context, page = open_app(browser, app_url, SIZES[where])
    upload(page, "specem")
    legend = page.locator("#legend").inner_text()
    assert "Winning model of each round" in legend and "smollm2" in legend
    decisions = page.evaluate(COLOURS_JS, [d for d in DECISION_STYLE if d != "segment"])
    tokens = page.evaluate("""() => [...document.querySelectorAll('#strip .el-tok')].map((t) => {
      const s = getComputedStyle(t); return [t.className, s.backgroundColor, s.borderBottomColor]; })""")
    models = {cls: (bg, line) for cls, bg, line in tokens if "model-" in cls}
    assert len({c.split("model-")[1].split()[0] for c in models}) >= 2, tokens  # the fixture's winners
    for cls, (bg, line) in models.items():
        for decision, (dbg, dline) in decisions.items():
            assert delta_e(_over_white(bg), _over_white(dbg)) >= 9, (cls, decision, bg, dbg)
            assert delta_e(_over_white(line), _over_white(dline)) >= 25, (cls, decision, line, dline)
    context.close()


TOPK_JS = """() => [...document.querySelectorAll('#topk-plot .bars .point')].map((p) => {
  const text = p.querySelector('text');
  const path = p.querySelector('path')?.getBBox();
  return {text: text?.textContent || '', italic: text ? getComputedStyle(text).fontStyle === 'italic' : false,
          width: path ? path.width : 0};
})"""


@pytest.mark.parametrize("where", list(SIZES))
def test_top_k_keys_outside_a_models_top_k_do_not_read_as_zero(browser, app_url, where):
    """Issue 39: "not in its top 10" sat at 0 beside short unlabelled bars, so it read as 0%. Each key outside a
    model's top k has no bar and faint italic words; every drawn bar says its value."""
    context, page = open_app(browser, app_url, SIZES[where])
    upload(page, "safe_math")
    click_token(page, 27, "response")
    page.locator("#topk-plot").scroll_into_view_if_needed()
    page.wait_for_function("() => document.querySelectorAll('#topk-plot .bars .point').length >= 20")
    page.wait_for_timeout(500)
    points = page.evaluate(TOPK_JS)
    absent = [p for p in points if p["text"].startswith("not in its top")]
    present = [p for p in points if not p["text"].startswith("not in its top")]
    assert absent and present, points
    assert all(p["italic"] and p["width"] < 0.5 for p in absent), absent
    assert all(re.match(r"(<1|\d+)%", p["text"]) and not p["italic"] for p in present), present
    assert any(p["text"] == "not in its top 10 · chosen" for p in absent)  # qwen had no "." in its top 10
    context.close()


JARGON = ("E/T", "λ", "η", "GaC gate", "llamacpp", "fork --at")
NEVER = ("llamacpp", "fork --at")  # ids of the command line: not even in brackets on a first screen


VISIBLE_TEXT_JS = """(root) => {
  const out = [];
  const walker = document.createTreeWalker(document.querySelector(root), NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    if (!node.data.trim() || node.parentElement.closest('.el-muted, [title] .el-help')) continue;
    const range = document.createRange();
    range.selectNodeContents(node);
    const r = range.getBoundingClientRect();
    if (r.height > 0 && r.bottom > 0 && r.top < innerHeight) out.push(node.data.trim());
  }
  return out;
}"""


@pytest.mark.parametrize("where", list(SIZES))
def test_the_first_screen_speaks_plain_words_before_jargon(browser, app_url, where):
    """Issue 39: "(llamacpp)", E/T, λ, η, "GaC gate" and "fork --at 5" met a visitor in the first view, the status
    lines, the legend and the controls. The first screen's visible text, the engine controls' labels and a replaced
    token's explanation (its muted detail aside) name things in words; a symbol comes only after them, in brackets."""
    context, page = open_app(browser, app_url, SIZES[where])
    texts = page.evaluate(VISIBLE_TEXT_JS, "body")
    screen = " | ".join(texts)
    assert "recorded run" in screen
    assert not [j for j in NEVER if j in screen], screen
    assert not [j for j in JARGON if j in _outside_brackets(screen)], screen
    page.get_by_text("Engine settings").click()
    page.locator("#max-tokens").wait_for(state="visible")
    labels = page.evaluate("""() => [...document.querySelectorAll('#run-form [data-testid="block-info"], #run-form label span')]
        .map((l) => l.textContent.trim()).filter((t) => t)""")
    assert len(labels) >= 10, labels
    bad = [t for t in labels if [j for j in JARGON if j in _outside_brackets(t)]]
    assert not bad, bad
    assert any("λ" in t for t in labels) and any("η" in t for t in labels)  # the symbols stay, as the detail
    upload(page, "safe_math")
    click_token(page, 18, "response")
    said = page.evaluate("""() => [...document.querySelectorAll('#explanation p:not(.el-muted)')].map((p) => p.innerText)""")
    assert said and not [j for j in NEVER if j in " ".join(said)], said
    context.close()


@pytest.mark.parametrize("where", list(SIZES))
def test_stop_is_off_while_nothing_runs_and_on_while_a_run_streams(browser, app_url, where):
    """Issue 39: Stop looked the same whether a run was going or not. Idle it is disabled and grey; from Run until
    the run ends it is enabled and red; after Stop (or the end) it is off again."""
    context, page = open_app(browser, app_url, SIZES[where])
    stop = page.locator("#stop-button")
    look = "(b) => [getComputedStyle(b).backgroundColor, getComputedStyle(b).color]"
    idle = stop.evaluate(look)
    assert stop.is_disabled()
    page.locator("#prompt textarea").fill("Write a long story about the river Maritsa.")
    for name in ("qwen", "gemma3"):
        page.locator("#models").get_by_label(name, exact=True).uncheck()
    page.wait_for_function("() => document.querySelector('#drafter input')?.value === 'smollm2'")
    page.locator("#method").get_by_label("Single model").check()
    page.locator("#run-button").click()
    page.wait_for_function("() => !document.querySelector('#stop-button').disabled")
    page.wait_for_function("() => /Running single/.test(document.querySelector('#status')?.innerText || '')")
    assert stop.is_enabled()
    active = stop.evaluate(look)
    change = max(delta_e(_over_white(a), _over_white(b)) for a, b in zip(idle, active, strict=True))
    assert change >= 20, (idle, active)  # its face or its label visibly changes colour (grey to the theme's red)
    page.wait_for_selector("#strip .el-tok")
    page.evaluate("() => document.querySelector('#stop-button').click()")
    page.wait_for_function("() => /Stopped|Done/.test(document.querySelector('#status')?.innerText || '')")
    page.wait_for_function("() => document.querySelector('#stop-button').disabled")
    context.close()


@pytest.mark.parametrize("where", list(SIZES))
def test_the_examples_stay_open_to_try_another(browser, app_url, where):
    """Issue 39: the examples accordion closed after one click. It stays open: a visitor fills the form with one
    example, then with another."""
    context, page = open_app(browser, app_url, SIZES[where])
    examples = page.locator("#examples")
    examples.get_by_text("Code: a palindrome check (SpecEM)").click()
    page.wait_for_function("() => (document.querySelector('#prompt textarea')?.value || '').includes('palindrome')")
    page.wait_for_timeout(500)
    second = examples.get_by_text("Math: Natalia's clips (SAFE)")
    assert second.is_visible()
    second.click()
    page.wait_for_function("() => (document.querySelector('#prompt textarea')?.value || '').includes('Natalia')")
    assert page.locator("#method").get_by_label("SAFE").is_checked()
    assert examples.get_by_text("Names: Sofia in Plovdiv (SAFE)").is_visible()
    context.close()
