"""The tokenizer teaching tab: how several tokenizers cut one text, on one character axis.

Input is :func:`ensemble.tokens.align.compare`'s dict (or one of the same shape built by hand).
"""

from __future__ import annotations

import pandas as pd

from . import records as rd
from .aligned import BLOCK_CHARS, Box, Row, grid_html, key_html
from .escape import safe, whitespace

MAX_CHARS = 4000  # longer texts are drawn up to a cut near here (the counts still cover all of it)
IDS_BLOCK_CHARS = 14  # the ids view is wider per character: shorter blocks still fit a phone
_IDS_KEY = ('<div class="el-grid-key">Under each token: its id in that model\'s vocabulary. A character split '
            'into byte tokens shows one small box per byte token, with its bytes (<code>&lt;0xE4&gt;</code>).</div>')

MISMATCH_EXPLAINER = (
    "Token-level ensembles (UniTE, GaC) average the models' next-token distributions, which only makes sense "
    "at a point where every model's tokenization has a token edge. Tokenizers disagree about where those edges "
    "are: SmolLM2 writes **Sofia** as **S|of|ia**, while Gemma 3 keeps **Sofia** as one token. If the ensemble "
    "commits **S** and then asks Gemma for the next token, Gemma must continue from a prefix its own tokenizer "
    "never produces (an out-of-vocabulary-like state), so its prediction there is unreliable and can pull the "
    "ensemble off course. Every-token fusion runs into such points all the time, which is why its long answers "
    "degrade; SAFE ensembles only at boundaries all models share, so the dashed lines below are exactly where it "
    "refuses to fuse."
)


def _models(comparison) -> dict[str, dict]:
    models = comparison.get("models") if isinstance(comparison, dict) else None
    return {name: info for name, info in rd.mapping(models).items() if isinstance(info, dict)}


def _tokens(info: dict, text_len: int) -> list[dict]:
    out = []
    for tok in info.get("tokens", []) if isinstance(info.get("tokens"), list) else []:
        if not isinstance(tok, dict):
            continue
        start, end = tok.get("start"), tok.get("end")
        if isinstance(start, int) and isinstance(end, int) and not isinstance(start, bool) and 0 <= start <= end <= text_len:
            out.append(tok)
    return out


def _piece(text: str, token_id, show_whitespace: bool, classes: str = "el-piece") -> str:
    """A token's text over its id (the ids view)."""
    shown = whitespace(text, show_whitespace, breaks=False) if text else "&nbsp;"
    return f'<span class="{classes}"><span>{shown}</span><span class="el-id">{safe(token_id)}</span></span>'


def _boxes(tokens: list[dict], cut: int, colour: str, show_ids: bool = False, show_whitespace: bool = True) -> list[Box]:
    """One box per token, byte tokens of one character (same span) grouped into one box.

    With ``show_ids`` every box shows its token id under its text, and a byte group shows each of its byte
    tokens as its own small box (its bytes and id) inside the character's box, so byte fallback is visible:
    a character that costs one model three tokens shows three boxes there.
    """
    groups: list[list[dict]] = []
    for tok in tokens:
        if tok["start"] == tok["end"] or tok["end"] > cut:
            continue
        if groups and (groups[-1][0]["start"], groups[-1][0]["end"]) == (tok["start"], tok["end"]):
            groups[-1].append(tok)
        else:
            groups.append([tok])
    boxes = []
    for g in groups:
        ids = " ".join(str(t.get("id")) for t in g)
        pieces = [rd.text(t.get("text")) or "" for t in g]
        if len(g) > 1 or any(t.get("bytes") is True for t in g):
            title = f"{len(g)} byte token{'s' if len(g) > 1 else ''}: {' '.join(pieces)} · id {ids}"
            inner = "".join(_piece(p, t.get("id"), False, "el-piece el-byte") for p, t in zip(pieces, g, strict=True))
            html = f'<span class="el-byte-group">{inner}</span>' if show_ids else ""
            boxes.append(Box(g[0]["start"], g[0]["end"], title, f"{colour} bytes".strip(), html))
        else:
            html = _piece(pieces[0], g[0].get("id"), show_whitespace) if show_ids else ""
            boxes.append(Box(g[0]["start"], g[0]["end"], f"{pieces[0]!r} · id {ids}", colour, html))
    return boxes


def _draw_until(comparison: dict, text: str) -> int:
    """Where drawing stops: the whole text, or the last shared boundary at or before :data:`MAX_CHARS`."""
    if len(text) <= MAX_CHARS:
        return len(text)
    shared = [b for b in comparison.get("shared_boundaries", []) if isinstance(b, int) and 0 < b <= MAX_CHARS]
    return max(shared, default=MAX_CHARS)


def _byte_tokens(info: dict) -> int:
    tokens = info.get("tokens") if isinstance(info.get("tokens"), list) else []
    return sum(1 for t in tokens if isinstance(t, dict) and t.get("bytes") is True)


def tokenizers_html(comparison: dict, show_whitespace: bool = True, show_ids: bool = False) -> str:
    """Every model's tokens aligned on one character axis, with the agreement and counts in a header.

    ``show_ids``: each token's id under its text, and byte tokens as their own boxes (see :func:`_boxes`).
    """
    text = comparison.get("text") if isinstance(comparison, dict) else None
    models = _models(comparison)
    if not isinstance(text, str) or not models:
        return '<p class="el-muted">Type a text and choose at least one tokenizer.</p>'
    agreement = rd.number(comparison.get("agreement"))
    names = list(models)
    chips = []
    for name, info in models.items():
        count = info.get("count")
        missing = info.get("missing")
        lacks = f", lacks {len(missing)} boundar{'y' if len(missing) == 1 else 'ies'}" if isinstance(missing, list) and missing else ""
        n_bytes = _byte_tokens(info)
        lacks += f", {n_bytes} byte token{'s' if n_bytes != 1 else ''} (parts of characters)" if n_bytes else ""
        chips.append(f"<span><b>{safe(name)}</b> {safe(count)} tokens{safe(lacks)}</span>")  # models: named, not coloured
    header = (
        '<div class="el-header">'
        + (f'<span class="el-big">{agreement:.1f}%</span><span>of boundaries shared</span>' if agreement is not None else "")
        + f"<span>{len(text):,} characters</span>"
        + "".join(chips)
        + "</div>"
    )
    notes = "".join(f'<p class="el-muted">{safe(n)}</p>' for n in comparison.get("notes", []) if isinstance(n, str))
    cut = _draw_until(comparison, text)
    if cut < len(text):
        notes += f'<p class="el-muted">Showing the first {cut:,} of {len(text):,} characters; the counts cover the whole text.</p>'
    rows = [Row(name, _boxes(_tokens(models[name], len(text)), cut, "", show_ids, show_whitespace), f"{name}'s tokenization")
            for name in names]
    grid = grid_html(text, 0, cut, rows, show_whitespace=show_whitespace, axis_label="text",
                     block_chars=IDS_BLOCK_CHARS if show_ids else BLOCK_CHARS)
    key = key_html() + (_IDS_KEY if show_ids else "")
    return f'<div class="el-tokenizers{" el-ids" if show_ids else ""}">{header}{notes}{grid}{key}</div>'


def tokenizer_counts_frame(comparison: dict) -> pd.DataFrame:
    """Per model: tokens, characters per token, boundaries, and boundaries it lacks that another model has."""
    text = comparison.get("text", "") if isinstance(comparison, dict) else ""
    rows = []
    for name, info in _models(comparison).items():
        count = info.get("count") if isinstance(info.get("count"), int) else len(_tokens(info, len(text)))
        boundaries = info.get("boundaries") if isinstance(info.get("boundaries"), list) else []
        missing = info.get("missing") if isinstance(info.get("missing"), list) else []
        rows.append(
            {
                "model": name,
                "tokens": count,
                "characters per token": round(len(text) / count, 2) if count else None,
                "boundaries": len(boundaries),
                "missing boundaries": len(missing),
            }
        )
    return pd.DataFrame(rows, columns=["model", "tokens", "characters per token", "boundaries", "missing boundaries"])
