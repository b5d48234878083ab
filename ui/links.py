"""Shareable state: the page's URL holds the tab, the prompt (or the Tokenizers tab's text, tokenizers and ids
switch), the method, the models, the engine settings that differ from their defaults, projector mode and the
selected token (``#t=18``); opening such a link restores them. Also the keys that step through the strip.

Everything read from a URL is untrusted: names, methods and tabs must be ones the app offers, settings pass their
declarations' checks (:func:`ensemble.settings.check_value`), texts are capped; anything else is ignored.
"""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import urlencode

from ensemble.errors import SettingsError
from ensemble.settings import METHODS, check_value, default_of, specs
from ensemble.tokens.key_table import MAX_PROMPT_CHARS

from .controls import control_names, initial_value, settings_values
from .preload import PRELOAD_PLOTLY_JS

TABS = ("run", "tokenizers", "compare", "trace", "results")
MAX_LINK_TEXT = 4000
"""Longest prompt or text a link carries (browsers and servers cap URL length far below MAX_PROMPT_CHARS)."""


def _flag(value) -> str:
    return "true" if value else "false"


def tokenizer_query(text: str, models: list[str], ids: bool = False, show_whitespace: bool = True,
                    large: bool = False) -> str:
    """``?tab=tokenizers&text=…`` for the Tokenizers tab: its text, the chosen tokenizers, the ids switch and
    whitespace markers where they differ from the tab's defaults, and projector mode when it is on."""
    params: dict[str, str] = {"tab": "tokenizers", "text": (text or "")[:MAX_LINK_TEXT]}
    if models:
        params["tok_models"] = ",".join(models)
    if ids:
        params["ids"] = "true"
    if not show_whitespace:
        params["ws"] = "false"
    if large:
        params["large"] = "true"
    return "?" + urlencode(params)


def link_query(tab: str, prompt: str, method: str, models: list[str], controls: Mapping, large: bool = False) -> str:
    """``?tab=…&prompt=…`` for the Run tab's form (settings only where they differ from the app's defaults; projector
    mode when it is on)."""
    params: dict[str, str] = {"tab": tab if tab in TABS else "run", "prompt": (prompt or "")[:MAX_LINK_TEXT]}
    if large:
        params["large"] = "true"
    if method in METHODS:
        params["method"] = method
    if models:
        params["models"] = ",".join(models)
    values = settings_values(dict(controls))
    for name in control_names():
        if name in values and values[name] != settings_values({name: initial_value(name)})[name]:
            params[name] = str(values[name]).lower() if isinstance(values[name], bool) else str(values[name])
    return "?" + urlencode(params)


def _setting(name: str, raw: str):
    default = default_of(name)
    if isinstance(default, bool):
        value = {"true": True, "false": False}.get(raw.lower())
    elif isinstance(default, int):
        value = int(raw)
    elif isinstance(default, float) or name == "gac_gate":
        value = None if raw.lower() == "none" else float(raw)
    else:
        value = None if raw.lower() in ("none", "auto") else raw
    return check_value(name, value)


def _none_value(name: str):
    """The control's value for the setting ``name`` being None ("auto", a gate of 0)."""
    spec = specs()[name]
    return spec.none_as if spec.none_as is not None else initial_value(name)


def form_from_query(params: Mapping[str, str], model_choices: list[str]) -> dict:
    """What a link asks for, checked: ``tab``, ``prompt``, ``text``, ``method``, ``models``, ``tok_models``, the
    switches ``large`` (projector mode), ``ids`` and ``ws`` (Tokenizers tab) and ``settings`` (control values);
    keys it does not hold, or holds wrongly, are absent."""
    out: dict = {}
    if params.get("tab") in TABS:
        out["tab"] = params["tab"]
    for key in ("prompt", "text"):
        value = params.get(key)
        if isinstance(value, str) and value.strip() and len(value) <= min(MAX_LINK_TEXT, MAX_PROMPT_CHARS):
            out[key] = value
    if params.get("method") in METHODS:
        out["method"] = params["method"]
    for key in ("models", "tok_models"):
        names = [n.strip() for n in str(params.get(key, "")).split(",") if n.strip() in model_choices]
        if names:
            out[key] = list(dict.fromkeys(names))
    for key in ("large", "ids", "ws"):  # projector mode, the Tokenizers tab's ids switch and whitespace markers
        flag = {"true": True, "false": False}.get(str(params.get(key, "")).lower())
        if flag is not None:
            out[key] = flag
    settings = {}
    for name in control_names():
        if name in params:
            try:
                settings[name] = _setting(name, str(params[name]))
            except (SettingsError, ValueError):
                continue
    out["settings"] = {k: (v if v is not None else _none_value(k)) for k, v in settings.items()}
    return out


KEYS_JS = """
() => {
  const tokens = () => [...document.querySelectorAll('#strip .el-tok[data-i]')];
  document.addEventListener('keydown', (event) => {
    if (event.altKey || event.ctrlKey || event.metaKey) return;
    if (event.target.closest && event.target.closest('input, textarea, select, [contenteditable="true"]')) return;
    const all = tokens();
    if (!all.length) return;
    const current = all.findIndex((t) => t.classList.contains('el-selected'));
    let next = null;
    if (event.key === 'ArrowRight') next = all[current + 1];
    else if (event.key === 'ArrowLeft') next = all[Math.max(current - 1, 0)];
    else if (event.key === 'n' || event.key === 'p') {
      const notable = (t) => t.matches('.oov_blocked, .ensembled_replaced');
      const ahead = event.key === 'n' ? all.slice(current + 1) : all.slice(0, Math.max(current, 0)).reverse();
      next = ahead.find(notable);
    }
    if (!next) return;
    event.preventDefault();
    next.click();
    next.scrollIntoView({block: 'nearest'});
  });
  // #t=N: select token N, as a click would, whenever a finished run's strip shows it (the recording, or the linked
  // prompt run minutes later), for as long as the address names that token (a click on another token renames it)
  const wanted = /^#t=(\\d+)$/.exec(location.hash);
  if (wanted) {
    let timer = null;
    const select = () => {
      if (location.hash !== '#t=' + wanted[1]) return;
      if (/^\\s*Running /.test(document.getElementById('status')?.innerText || '')) return;  // done: the strip changes
      const token = document.querySelector(`#strip .el-tok[data-i="${wanted[1]}"]`);
      if (token && !token.classList.contains('el-selected')) { token.click(); token.scrollIntoView({block: 'center'}); }
    };
    const inside = (node) => (node.nodeType === 1 ? node : node.parentElement)?.closest?.('#strip, #status');
    new MutationObserver((changes) => {
      if (!changes.some((c) => inside(c.target))) return;
      clearTimeout(timer);
      timer = setTimeout(select, 600);  // once the strip and the status line have settled
    }).observe(document.body, {childList: true, subtree: true, characterData: true});
    timer = setTimeout(select, 600);
  }
""" + PRELOAD_PLOTLY_JS + """
}
"""
"""Runs once on page load: ←/→ step through the strip's tokens, n/p jump to the next/previous blocked or replaced
token (not while typing), a ``#t=N`` in the URL selects token N whenever a finished run shows it, and Plotly is
loaded ahead of the first chart (:mod:`ui.preload`)."""

SHARE_JS = """
(query) => {
  if (!query) return query;
  const url = location.origin + location.pathname + query + location.hash;
  history.replaceState(null, '', url);
  if (navigator.clipboard) navigator.clipboard.writeText(url).catch(() => {});
  return url;
}
"""
"""Turns the server's ``?…`` into the page's full URL: put in the address bar, copied, and shown in the box."""
