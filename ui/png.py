"""Save a drawn view (the token strip, the aligned tokenizer view) as a PNG, in the browser.

The browser has the fonts and the layout already, so the picture is drawn there, with no script from elsewhere:
the view is copied with every element's computed style written inline, put in an SVG ``foreignObject``, painted
onto a canvas at up to twice the screen's resolution, and offered as a download. Nothing reaches the server,
so it works the same offline, on a Space and in a trace loaded from a file.
"""

from __future__ import annotations

import json

# What a token box, a grid cell or a line of the strip needs to look the same outside the page: longhands only (a
# shorthand such as ``border`` reads "" when its sides differ, and a decision's underline is its bottom border
# alone), the ligature and kerning switches (else the picture joins "fi" across two tokens again), and sizes.
_SIDES = ("top", "right", "bottom", "left")
_PROPS = (
    "display", "position", "box-sizing", "width", "height", "min-width", "min-height", "max-width",
    *(f"margin-{s}" for s in _SIDES), *(f"padding-{s}" for s in _SIDES),
    *(f"border-{s}-{p}" for s in _SIDES for p in ("width", "style", "color")),
    "border-top-left-radius", "border-top-right-radius", "border-bottom-right-radius", "border-bottom-left-radius",
    "box-shadow", "outline-style", "outline-width", "outline-color", "outline-offset", "color", "background-color",
    "background-image", "background-size", "background-position", "background-repeat", "background-clip",
    "background-origin", "opacity", "visibility", "font-family", "font-size", "font-weight", "font-style", "font-stretch",
    "font-variant-numeric", "font-variant-ligatures", "font-kerning", "font-feature-settings", "line-height",
    "letter-spacing", "word-spacing", "white-space", "tab-size", "text-transform", "text-decoration-line",
    "text-decoration-style", "text-decoration-color", "text-decoration-thickness", "text-underline-offset",
    "vertical-align", "text-align", "grid-template-columns", "grid-template-rows", "grid-row-start", "grid-row-end",
    "grid-column-start", "grid-column-end", "row-gap", "column-gap", "justify-self", "align-self", "align-items",
    "justify-content", "flex-direction", "flex-wrap", "flex-basis", "flex-grow", "flex-shrink", "z-index",
    "overflow-wrap", "word-break", "box-decoration-break", "-webkit-box-decoration-break",
)

_TEMPLATE = """async () => {
  const nodes = __SELECTORS__.map((sel) => document.querySelector(sel)).filter((n) => n && n.textContent.trim());
  const node = nodes[nodes.length - 1];
  if (!node) { alert('Nothing to save yet: run the ensemble or compare tokenizations first.'); return; }
  const props = __PROPS__;
  const painted = (root) => {  // the rightmost painted box and the block its line belongs to (block boxes span
    let right = root.getBoundingClientRect().left, holder = root;  // their column whatever they hold: only texts
    const walker = document.createTreeWalker(root, NodeFilter.SHOW_ELEMENT | NodeFilter.SHOW_TEXT);  // and inline
    for (let n = walker.nextNode(); n; n = walker.nextNode()) {  // boxes count)
      let rects = [];
      if (n.nodeType === Node.TEXT_NODE) {
        const range = document.createRange();
        range.selectNodeContents(n);
        rects = [...range.getClientRects()];
      } else if (getComputedStyle(n).display.startsWith('inline')) {
        rects = [...n.getClientRects()];
      }
      rects.forEach((r) => { if (r.width > 0 && r.right > right) { right = r.right; holder = n; } });
    }
    // the box whose width the line fills: up past inline boxes and flex or grid items (a legend entry) to a block
    const item = (el) => /flex|grid/.test(getComputedStyle(el.parentElement).display);
    let block = holder.nodeType === Node.TEXT_NODE ? holder.parentElement : holder;
    while (block !== root && (getComputedStyle(block).display.startsWith('inline') || item(block))) block = block.parentElement;
    return {right, block};
  };
  const copy = (original) => {
    const clone = original.cloneNode(true);
    const from = [original, ...original.querySelectorAll('*')];
    const to = [clone, ...clone.querySelectorAll('*')];
    from.forEach((el, i) => {
      const style = getComputedStyle(el);
      to[i].setAttribute('style', props.map((p) => p + ':' + style.getPropertyValue(p)).join(';') + ';overflow:visible');
      to[i].removeAttribute('title');
    });
    // As wide as what it paints, not as its box: a short strip in a wide column left the picture's right half
    // empty. The rightmost painted box (each text's line boxes, each inline box: a swatch, a token), plus what
    // lies right of its line inside the box (the paddings of the blocks around it): the lines then fit the clone
    // as they fit the page, so none wraps anew. A block inside that had the column's width written in fills the
    // narrower clone instead.
    const box = original.getBoundingClientRect();
    const {right, block} = painted(original);
    const st = getComputedStyle(block);
    const inset = box.right - (block.getBoundingClientRect().right - parseFloat(st.paddingRight || '0') - parseFloat(st.borderRightWidth || '0'));
    const width = Math.ceil(Math.min(Math.max(original.scrollWidth, box.width), right - box.left + original.scrollLeft + inset + 1));
    clone.style.boxSizing = 'border-box';  // the width counts its padding and border
    clone.style.width = width + 'px';
    from.forEach((el, i) => {
      if (i > 0 && !getComputedStyle(el).display.startsWith('inline') && el.getBoundingClientRect().width > width - 1) {
        to[i].style.width = 'auto';
        to[i].style.maxWidth = 'none';
      }
    });
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
  // (max-content, not the page's width: the page's body is a flex column, which stretched the frame to 1366 px and
  // left the picture's right half empty)
  frame.setAttribute('style', 'padding:' + pad + 'px;background:' + paint + ';display:inline-block;width:max-content;' +
    'align-self:flex-start;box-sizing:content-box;color:' + getComputedStyle(node).color);
  nodes.forEach((n) => frame.appendChild(copy(n)));
  // The picture is an image: it reaches no font of the page. Every @font-face of a family the view uses goes in,
  // its file read back from the page's own origin as a data: URL (a face that cannot be read keeps the fallback).
  const families = new Set();
  [frame, ...frame.querySelectorAll('*')].forEach((el) => (el.style.fontFamily || '').split(',')
    .forEach((f) => families.add(f.trim().replace(/^["']|["']$/g, '').toLowerCase())));
  const faces = [];
  for (const sheet of document.styleSheets) {
    let rules = [];
    try { rules = [...sheet.cssRules]; } catch (e) { continue; }  // another origin's sheet: not readable
    for (const rule of rules) {
      if (!(rule instanceof CSSFontFaceRule)) continue;
      const family = rule.style.getPropertyValue('font-family').trim().replace(/^["']|["']$/g, '');
      if (!families.has(family.toLowerCase())) continue;
      const src = rule.style.getPropertyValue('src');
      const found = /url\\(["']?([^"')]+)["']?\\)/.exec(src);
      if (!found) continue;
      try {
        const url = new URL(found[1], sheet.href || location.href);
        if (url.origin !== location.origin && url.protocol !== 'data:') continue;
        const blob = await (await fetch(url)).blob();
        const data = await new Promise((done, fail) => {
          const reader = new FileReader(); reader.onload = () => done(reader.result); reader.onerror = fail;
          reader.readAsDataURL(blob);
        });
        faces.push('@font-face{font-family:"' + family + '";src:url(' + data + ');font-weight:' +
          (rule.style.getPropertyValue('font-weight') || 'normal') + ';font-style:' +
          (rule.style.getPropertyValue('font-style') || 'normal') + ';}');
      } catch (e) { /* keep the fallback face */ }
    }
  }
  if (faces.length) {
    const style = document.createElement('style');
    style.textContent = faces.join('\\n');
    frame.prepend(style);
  }
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
