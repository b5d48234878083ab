"""What a person sees of the Run tab while a run streams, sampled on every animation frame in the page.

A check that reads the page once can race the run (a token that lands mid-scroll, a run that ends sooner on a faster
CPU); these helpers record every frame from the click on Run, so a test waits for the run to have produced enough to
judge (a condition, never a fixed time) and then asserts over every frame of the stretch it is about."""

from __future__ import annotations

SIZES = {"desktop": (1366, 768), "phone": (390, 844)}

# Samples, on every animation frame, what a person sees of the Run tab: whether the status line is on screen, the
# page's scroll, the strip's height and tokens, the inspector's text and whether its charts show, the stats' text.
WATCH_JS = """() => {
  window.__samples = [];
  const seen = (el) => { if (!el) return false; const r = el.getBoundingClientRect();
    return r.height > 0 && r.top >= 0 && r.bottom <= window.innerHeight; };
  const shown = (id) => { const el = document.getElementById(id); return !!el && el.offsetParent !== null; };
  const sample = () => {
    const status = document.getElementById('status'), strip = document.getElementById('strip');
    window.__samples.push({
      t: performance.now(), y: window.scrollY, status: (status?.innerText || '').trim(), statusSeen: seen(status),
      statusTop: Math.round(status?.getBoundingClientRect().top ?? 0),
      tokens: document.querySelectorAll('#strip .el-tok').length, stripHeight: Math.round(strip?.getBoundingClientRect().height || 0),
      selected: document.querySelectorAll('#strip .el-selected').length,
      explanation: (document.getElementById('explanation')?.innerText || '').trim(),
      tokenization: (document.getElementById('tokenization')?.innerText || '').trim(),
      charts: shown('topk-plot') || shown('fusion-plot'), stats: (document.getElementById('stats')?.innerText || '').trim(),
    });
    if (!window.__stopWatching) requestAnimationFrame(sample);
  };
  window.__stopWatching = false;
  requestAnimationFrame(sample);
}"""
STREAMING = r"(s) => /^Running /.test(s.status) && s.tokens > 0"


def open_app(browser, app_url, size):
    context = browser.new_context(viewport={"width": size[0], "height": size[1]})
    page = context.new_page()
    page.set_default_timeout(180_000)
    page.goto(app_url)
    page.wait_for_function("() => (document.querySelector('#status')?.innerText || '').includes('recorded run')")
    return context, page


def set_max_tokens(page, tokens: int) -> None:
    """Set the token budget as a visitor does: open the engine settings, type the number."""
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


def start_run(page, prompt: str, model: str = "smollm2", tokens: int = 200) -> None:
    """A single-model run of ``prompt`` with a budget of ``tokens``, started as a visitor starts it."""
    page.locator("#prompt textarea").fill(prompt)
    for name in ("qwen", "smollm2", "gemma3"):
        box = page.locator("#models").get_by_label(name, exact=True)
        if box.is_checked() != (name == model):
            box.click()
    page.locator("#method").get_by_label("Single model").check()
    set_max_tokens(page, tokens)
    page.evaluate(WATCH_JS)
    page.locator("#run-button").click()


def samples(page, stop: bool = True) -> list[dict]:
    if stop:
        page.evaluate("() => { window.__stopWatching = true; }")
    return page.evaluate("() => window.__samples")
