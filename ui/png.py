"""Save a drawn view (the token strip, the aligned tokenizer view) as a PNG, in the browser.

The browser has the fonts and the layout already, so the picture is drawn there, with no script from elsewhere:
the view is copied with every element's computed style written inline, put in an SVG ``foreignObject``, painted
onto a canvas at up to twice the screen's resolution, and offered as a download. Nothing reaches the server,
so it works the same offline, on a Space and in a trace loaded from a file.
"""

from __future__ import annotations

import json

# What a token box, a grid cell or a line of the strip needs to look the same outside the page.
_PROPS = (
    "display", "position", "box-sizing", "width", "min-width", "min-height", "margin", "padding", "border",
    "border-radius", "box-shadow", "outline", "outline-offset", "color", "background-color", "background-image",
    "background-size", "background-position", "background-repeat", "opacity", "font-family", "font-size",
    "font-weight", "font-style", "font-variant-numeric", "line-height", "letter-spacing", "white-space",
    "text-decoration", "text-underline-offset", "vertical-align", "text-align", "grid-template-columns",
    "grid-row", "grid-column", "row-gap", "column-gap", "justify-self", "align-self", "align-items",
    "justify-content", "flex-direction", "flex-wrap", "flex-basis", "gap", "z-index", "overflow-wrap", "word-break",
)

_TEMPLATE = """async () => {
  const nodes = __SELECTORS__.map((sel) => document.querySelector(sel)).filter((n) => n && n.textContent.trim());
  const node = nodes[nodes.length - 1];
  if (!node) { alert('Nothing to save yet: run the ensemble or compare tokenizations first.'); return; }
  const props = __PROPS__;
  const copy = (original) => {
    const clone = original.cloneNode(true);
    const from = [original, ...original.querySelectorAll('*')];
    const to = [clone, ...clone.querySelectorAll('*')];
    from.forEach((el, i) => {
      const style = getComputedStyle(el);
      to[i].setAttribute('style', props.map((p) => p + ':' + style.getPropertyValue(p)).join(';') + ';overflow:visible');
      to[i].removeAttribute('title');
    });
    clone.style.width = Math.ceil(Math.max(original.scrollWidth, original.getBoundingClientRect().width)) + 'px';
    clone.style.margin = '0 0 8px 0';
    return clone;
  };
  let paint = 'rgb(255, 255, 255)';  // the first opaque background behind the view (the theme's, dark or light)
  for (let el = node; el; el = el.parentElement) {
    const bg = getComputedStyle(el).backgroundColor;
    if (bg && bg !== 'transparent' && !/rgba\\(.*,\\s*0\\)$/.test(bg)) { paint = bg; break; }
  }
  const pad = 12;
  const frame = document.createElement('div');
  frame.setAttribute('style', 'padding:' + pad + 'px;background:' + paint + ';display:inline-block;color:' + getComputedStyle(node).color);
  nodes.forEach((n) => frame.appendChild(copy(n)));
  document.body.appendChild(frame);  // measured once laid out at the clone's width
  const height = Math.ceil(frame.getBoundingClientRect().height);
  const total = Math.ceil(frame.getBoundingClientRect().width);
  frame.remove();
  const xml = new XMLSerializer().serializeToString(frame);
  const svg = '<svg xmlns="http://www.w3.org/2000/svg" width="' + total + '" height="' + height + '">' +
    '<foreignObject x="0" y="0" width="100%" height="100%">' + xml + '</foreignObject></svg>';
  const image = new Image();
  image.src = 'data:image/svg+xml;charset=utf-8,' + encodeURIComponent(svg);
  await image.decode();
  const scale = Math.max(1, Math.min(2, 16000 / Math.max(total, height)));  // sharp on a slide, within canvas limits
  const canvas = document.createElement('canvas');
  canvas.width = Math.round(total * scale);
  canvas.height = Math.round(height * scale);
  const ctx = canvas.getContext('2d');
  ctx.fillStyle = paint;
  ctx.fillRect(0, 0, canvas.width, canvas.height);
  ctx.scale(scale, scale);
  ctx.drawImage(image, 0, 0);
  const blob = await new Promise((done) => canvas.toBlob(done, 'image/png'));
  const link = document.createElement('a');
  link.href = URL.createObjectURL(blob);
  link.download = __FILENAME__;
  document.body.appendChild(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(link.href), 10000);
}"""


def save_png_js(selectors: list[str], filename: str) -> str:
    """The click handler that saves the elements ``selectors`` (those with text), one under another, as ``filename``."""
    return (_TEMPLATE.replace("__SELECTORS__", json.dumps(selectors)).replace("__PROPS__", json.dumps(list(_PROPS)))
            .replace("__FILENAME__", json.dumps(filename)))


STRIP_PNG_JS = save_png_js(["#legend", "#strip"], "ensemble-lens-strip.png")  # the legend says what the colours mean
TOKENIZERS_PNG_JS = save_png_js(["#tok-view"], "ensemble-lens-tokenizers.png")
