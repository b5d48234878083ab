"""Tokenizer comparison: how several tokenizers cut one text, aligned on one character axis.

This is the data behind the teaching tab and ``python -m ensemble tokenize``: each model's tokens with
character spans, the boundaries every model shares, those each model lacks, and an agreement percentage
(shared interior boundaries over all interior boundaries). Byte tokens that split one character share that
character's span, so no boundary ever falls inside a character.
"""

from __future__ import annotations

from itertools import pairwise

from ..errors import InputError
from .key_table import MAX_PROMPT_CHARS, KeyTable, display_key, replace_lone_surrogates


def clean_text(text) -> tuple[str, list[str]]:
    """Accept any text; lone surrogates (not encodable) are replaced, with a note."""
    if not isinstance(text, str):
        raise InputError("The text must be a string.")
    if len(text) > MAX_PROMPT_CHARS:  # the prompt limit: what the app accepts as a prompt can be tokenized, no more
        raise InputError(f"The text has {len(text):,} characters; the limit is {MAX_PROMPT_CHARS:,}.")
    text, replaced = replace_lone_surrogates(text)
    notes = ["The text held lone surrogates (invalid UTF-16 halves); they were replaced by '?'."] if replaced else []
    return text, notes


def compare(text: str, tables: dict[str, KeyTable]) -> dict:
    """Compare tokenizations of ``text``.

    Returns a JSON-ready dict: ``text``, ``models`` (name -> tokens ``[{id, text, start, end, bytes}]``,
    ``count``, ``boundaries``, ``missing``), ``shared_boundaries``, ``all_boundaries``, ``segments`` (the
    text cut at every boundary of any model, each with the models that have its right edge) and ``agreement``
    in percent.
    """
    text, notes = clean_text(text)
    per_model: dict[str, dict] = {}
    boundary_sets: dict[str, set[int]] = {}
    for name, table in tables.items():
        spans = table.spans(text)
        tokens = []
        for i, (token_id, start, end) in enumerate(zip(spans.ids, spans.starts, spans.ends, strict=True)):
            shared_char = (i > 0 and spans.starts[i - 1] == start) or (i + 1 < len(spans.ids) and spans.starts[i + 1] == start)
            piece = display_key(table.key(token_id)) if shared_char else text[start:end]
            tokens.append({"id": int(token_id), "text": piece, "start": start, "end": end, "bytes": shared_char})
        boundary_sets[name] = set(spans.boundaries())
        per_model[name] = {"tokens": tokens, "count": len(tokens)}
    union = set().union(*boundary_sets.values()) if boundary_sets else {0, len(text)}
    shared = set.intersection(*boundary_sets.values()) if boundary_sets else set(union)
    interior_union = union - {0, len(text)}
    interior_shared = shared - {0, len(text)}
    for name, info in per_model.items():
        info["boundaries"] = sorted(boundary_sets[name])
        info["missing"] = sorted(union - boundary_sets[name])
    ordered = sorted(union)
    segments = []
    for left, right in pairwise(ordered):
        segments.append(
            {
                "start": left,
                "end": right,
                "text": text[left:right],
                "edge_models": [n for n, b in boundary_sets.items() if right in b],
                "shared_edge": right in shared,
            }
        )
    agreement = 100.0 if not interior_union else round(100.0 * len(interior_shared) / len(interior_union), 2)
    return {
        "text": text,
        "models": per_model,
        "shared_boundaries": sorted(shared),
        "all_boundaries": ordered,
        "segments": segments,
        "agreement": agreement,
        "notes": notes,
    }
