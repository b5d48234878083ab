"""Escaping for every string that reaches HTML: model output, keys, model names, settings, uploaded traces.

Gradio's ``gr.HTML`` inserts its value with ``innerHTML`` into a template that is both a JavaScript template
string and a Handlebars template, so besides the HTML metacharacters ``$``, backticks and braces must not
survive either. Everything in ``visual/`` builds HTML from :func:`safe` and :func:`whitespace` only.
"""

from __future__ import annotations

import html
import re

_TEMPLATE_CHARS = str.maketrans({"$": "&#36;", "`": "&#96;", "{": "&#123;", "}": "&#125;"})
_SURROGATE = re.compile("[\ud800-\udfff]")
_WS_GLYPHS = {" ": "·", "\t": "→", "\n": "↵", "\r": "␍"}
_WS_RUN = re.compile(r"[ \t\n\r]+")


def safe(text) -> str:
    """HTML-escape ``text`` (quotes included) and neutralise ``$``, backtick, ``{`` and ``}``.

    ``None`` becomes ``""``; other non-strings are converted with ``str``. Lone surrogates (possible in an
    uploaded JSON trace) become U+FFFD so the result always encodes as UTF-8.
    """
    if text is None:
        return ""
    text = _SURROGATE.sub("\ufffd", str(text))
    return html.escape(text, quote=True).translate(_TEMPLATE_CHARS)


def whitespace(text, show: bool = True, *, breaks: bool = True) -> str:
    """Escape ``text`` and make its whitespace visible.

    Args:
        text: untrusted text.
        show: draw spaces as ``·``, tabs as ``→``, newlines as ``↵`` (then a line break), carriage returns as
            ``␍``, inside ``<span class="ws">`` so CSS can dim them. With ``show=False`` the text is only
            escaped and newlines become ``<br>``.
        breaks: emit ``<br>`` for newlines. One-line layouts (the aligned tokenization grids) pass False: a
            newline is then always drawn as ``↵`` and tabs as ``→``, so every character keeps one cell.
    """
    text = "" if text is None else str(text)
    out: list[str] = []
    pos = 0
    for match in _WS_RUN.finditer(text):
        out.append(safe(text[pos : match.start()]))
        out.append(_whitespace_run(match.group(), show, breaks))
        pos = match.end()
    out.append(safe(text[pos:]))
    return "".join(out)


def _whitespace_run(run: str, show: bool, breaks: bool) -> str:
    if not show and breaks:
        return run.replace("\n", "<br>")
    if not show:  # one-line layout without markers: keep spaces, draw what would break the line
        glyphs = "".join(" " if ch == " " else _WS_GLYPHS[ch] for ch in run)
        return f'<span class="ws">{glyphs}</span>' if glyphs.strip() else glyphs
    parts: list[str] = []
    pending = ""
    for ch in run:
        pending += _WS_GLYPHS[ch]
        if ch == "\n" and breaks:
            parts.append(f'<span class="ws">{pending}</span><br>')
            pending = ""
    if pending:
        # <wbr>: a line may wrap after visible spaces (the dots are not break opportunities themselves)
        parts.append(f'<span class="ws">{pending}</span>' + ("<wbr>" if breaks else ""))
    return "".join(parts)


def plain_whitespace(text) -> str:
    """``text`` with its whitespace drawn as the glyphs :func:`whitespace` uses, as plain text (for table cells,
    where a leading space would otherwise vanish)."""
    return "".join(_WS_GLYPHS.get(ch, ch) for ch in ("" if text is None else str(text)))


def status_html(text) -> str:
    """The app's status line: one escaped paragraph.

    The status line is a ``gr.HTML``, never Markdown: it shows model names, drafts and trace fields, and in
    Markdown ``![x](http://host/x.png)`` becomes an image the browser fetches, ``[x](url)`` a link and a bare
    URL an autolink. Escaped HTML has no such syntax, so one rule (:func:`safe`) covers every component.
    """
    return f'<p class="el-status">{safe(text)}</p>'


def error_html(message) -> str:
    """An error in place of a view: one escaped block."""
    return f'<div class="el-error">{safe(message)}</div>'
