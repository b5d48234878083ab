"""The Tokenizers tab: how the offered models' tokenizers cut one text, on the page and as one HTML file."""

from __future__ import annotations

import tempfile
from pathlib import Path

import gradio as gr

import visual
from ensemble.errors import EnsembleError
from ensemble.tokens.align import compare
from ui import config
from ui.view_tuples import TokenizerView


def comparison(text, model_names) -> dict:
    """The aligned tokenizations of ``text`` by the offered models ``model_names`` (a list or a comma list)."""
    names = config.offered(model_names)
    return compare(text, {name: config.POOL.keys(name) for name in names})


def tokenize_view(text, model_names, show_whitespace, show_ids=False) -> TokenizerView:
    try:
        aligned = comparison(text or "", model_names)
    except EnsembleError as exc:
        return TokenizerView(visual.error_html(str(exc)), None)
    return TokenizerView(visual.tokenizers_html(aligned, show_whitespace=bool(show_whitespace), show_ids=bool(show_ids)),
                         visual.tokenizer_counts_frame(aligned))


def tokenizers_page(text, model_names, show_ids=False) -> str:
    """The aligned tokenizer view as one self-contained HTML file (its path, for download)."""
    try:
        aligned = comparison(text or "", model_names)
    except EnsembleError as exc:
        raise gr.Error(str(exc)) from exc
    page = Path(tempfile.mkdtemp(prefix="ensemble-lens-")) / "tokenizers.html"
    page.write_text(visual.tokenizers_document(aligned, show_ids=bool(show_ids)), encoding="utf-8")
    return str(page)
