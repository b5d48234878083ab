"""The app's text font, declared once: the theme (``app.py``) uses it, and a page exported from the app embeds it,
so the offline page is set in the same letters as the app (not the reader's default sans, DejaVu on Linux).

The font files are the ones Gradio ships for its themes (OFL-licensed); they are read from the installed package
without importing it (``visual`` never imports gradio). Without them, an exported page declares the same stack and
the reader's system chooses, as before.
"""

from __future__ import annotations

import base64
import functools
import importlib.util
from pathlib import Path

TEXT_FONT = "Montserrat"
TEXT_WEIGHTS = (400, 700)
"""The family and weights of the app's text (Gradio's ``Soft`` theme's own choice, kept)."""
TEXT_FALLBACKS = ("ui-sans-serif", "system-ui", "sans-serif")
TEXT_STACK = ", ".join((f'"{TEXT_FONT}"', *TEXT_FALLBACKS))
_FILE_WEIGHTS = {400: "Regular", 700: "Bold"}


def _font_folder() -> Path | None:
    spec = importlib.util.find_spec("gradio")  # finds the package; does not import it
    for root in (spec.submodule_search_locations or []) if spec else []:
        folder = Path(root) / "templates" / "frontend" / "static" / "fonts" / TEXT_FONT.replace(" ", "")
        if folder.is_dir():
            return folder
    return None


@functools.lru_cache(maxsize=1)
def embedded_faces() -> str:
    """``@font-face`` rules for the text font's weights, each file inline as a ``data:`` URL ("" when the files are
    not installed)."""
    folder = _font_folder()
    rules = []
    for weight in TEXT_WEIGHTS:
        path = folder / f"{TEXT_FONT.replace(' ', '')}-{_FILE_WEIGHTS[weight]}.woff2" if folder else None
        if path is None or not path.is_file():
            continue
        data = base64.b64encode(path.read_bytes()).decode("ascii")
        rules.append(f'@font-face {{ font-family: "{TEXT_FONT}"; src: url(data:font/woff2;base64,{data}) format("woff2"); '
                     f"font-weight: {weight}; font-style: normal; font-display: block; }}")
    return "\n".join(rules)
