"""Several tokenizations of one text on one character axis (a CSS grid, shared by two views).

Columns are the segments between consecutive boundaries of any row, so a token that covers several segments
spans several columns, and a boundary one model lacks shows as a dashed line cutting through its token.
Long texts are cut into blocks at offsets where no token of any row straddles the cut. The blocks flow like
words in a paragraph (a wrapping flex row, each block with its own row labels), so the view fills whatever
width it gets, from a phone to a projector; a newline in the text starts a new line of blocks.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise

from .escape import safe, whitespace

BLOCK_CHARS = 28  # widest block, in characters with gutters (unless one token is wider): it fits a 390 px phone
GUTTER_CHARS = 0.85  # the 7 px gap a segment adds, in 14 px monospace characters


@dataclass
class Box:
    """One token (or byte group) of a row: its character span, tooltip and trusted extra CSS classes."""

    start: int
    end: int
    title: str = ""
    classes: str = ""
    html: str = ""  # trusted (already escaped) content drawn instead of the box's text, e.g. token ids


@dataclass
class Row:
    name: str
    boxes: list[Box]
    title: str = ""
    gap_title: str = "not recorded"  # tooltip of the dotted stretches no box of this row covers


def _inside(rows: list[Row]) -> list[set[int]]:
    """Per row, the offsets strictly inside one of its tokens (where this row has no boundary)."""
    out = []
    for row in rows:
        inside: set[int] = set()
        for box in row.boxes:
            inside.update(range(box.start + 1, box.end))
        out.append(inside)
    return out


def _edges(rows: list[Row]) -> list[set[int]]:
    return [{b.start for b in row.boxes} | {b.end for b in row.boxes} for row in rows]


def grid_html(
    text: str,
    lo: int,
    hi: int,
    rows: list[Row],
    *,
    show_whitespace: bool = True,
    mark: int | None = None,
    axis_label: str = "text",
    block_chars: int | None = BLOCK_CHARS,
    struck: tuple[int, int] | None = None,
) -> str:
    """Render ``rows`` over ``text[lo:hi]`` (offsets are into ``text``).

    Args:
        mark: an offset to draw as the decision point (a solid line across all rows).
        block_chars: wrap into blocks at most this wide (characters, plus :data:`GUTTER_CHARS` per segment), unless
            one token is wider (None: one block).
        struck: offsets ``[a, b)`` of the text drawn struck through (a draft that was discarded).
    """
    rows = [Row(r.name, [b for b in r.boxes if lo <= b.start < b.end <= hi], r.title, r.gap_title) for r in rows]
    inside = _inside(rows)
    edges = _edges(rows)
    cuts = sorted({lo, hi} | {e for es in edges for e in es if lo <= e <= hi} | ({mark} if mark is not None and lo <= mark <= hi else set()))
    blocks: list[tuple[int, int]] = []
    start = lo
    last_clean = None  # the latest offset since ``start`` where a block may end
    rank = {c: i for i, c in enumerate(cuts)}  # between two cuts lie as many segments as their ranks differ

    def width(a: int, b: int) -> float:  # in characters: the text plus the gutter each segment adds
        return (b - a) + GUTTER_CHARS * (rank[b] - rank[a])

    for c in cuts[1:]:
        if block_chars is None:
            break
        if width(start, c) > block_chars and last_clean is not None:  # c would make the block too wide: end it before
            blocks.append((start, last_clean))
            start, last_clean = last_clean, None
        if c == hi:
            break
        if not any(c in ins for ins in inside):
            last_clean = c
            if text[c - 1 : c] == "\n":
                blocks.append((start, c))
                start, last_clean = c, None
    blocks.append((start, hi))
    html = []
    for a, b in blocks:
        html.append(_block(text, a, b, [c for c in cuts if a <= c <= b], rows, inside, edges, show_whitespace, mark, axis_label,
                           struck))
        if b < hi and text[b - 1 : b] == "\n":
            html.append('<span class="el-grid-break"></span>')  # the text's own line break starts a new line of blocks
    return f'<div class="el-grid-wrap">{"".join(html)}</div>'


def _block(text, lo, hi, cuts, rows, inside, edges, show_whitespace, mark, axis_label, struck=None) -> str:
    column = {c: i + 2 for i, c in enumerate(cuts)}  # grid line where the segment starting at c begins
    n_rows = len(rows) + 1
    out = [f'<span class="el-grid-label" style="grid-row: 1">{safe(axis_label)}</span>']
    for c, d in pairwise(cuts):
        gone = struck is not None and struck[0] <= c and d <= struck[1]
        extra = ' struck" title="draft the models checked here; it was discarded' if gone else ""
        out.append(f'<span class="el-axis{extra}" style="grid-row: 1; grid-column: {column[c]}">{_cell(text[c:d], show_whitespace)}</span>')
    for r, row in enumerate(rows, start=2):
        out.append(f'<span class="el-grid-label" style="grid-row: {r}" title="{safe(row.title)}">{safe(row.name)}</span>')
        covered = []
        boxes = [b for b in row.boxes if lo <= b.start and b.end <= hi]
        for k, box in enumerate(boxes):
            cls = " ".join(x for x in ("el-box", "alt" if k % 2 else "", box.classes) if x)
            out.append(
                f'<span class="{cls}" style="grid-row: {r}; grid-column: {column[box.start]} / {column[box.end]}" '
                f'title="{safe(box.title)}">{box.html or _cell(text[box.start:box.end], show_whitespace)}</span>'
            )
            covered.append((box.start, box.end))
        for a, b in _gaps(covered, cuts):
            out.append(f'<span class="el-box unknown" style="grid-row: {r}; grid-column: {column[a]} / {column[b]}" title="{safe(row.gap_title)}"></span>')
    for i, c in enumerate(cuts):
        kinds = []
        if c == mark:
            kinds.append("decision")
        elif lo < c < hi:
            lacking = [row.name for row, ins in zip(rows, inside) if c in ins]
            having = [row.name for row, es in zip(rows, edges) if c in es]
            if lacking:
                kinds.append("missing")
            elif len(having) >= 2:
                kinds.append("shared")
        if not kinds:
            continue
        # The line sits on the right edge of the segment that ends at c (left edge of the first one).
        place = f"grid-column: {column[cuts[i - 1]]}" if i > 0 else f"grid-column: {column[c]}"
        extra = "" if i > 0 else " start"
        out.append(f'<span class="el-edge {kinds[0]}{extra}" style="grid-row: 1 / span {n_rows}; {place}"></span>')
    return f'<div class="el-grid-block">{"".join(out)}</div>'


def _gaps(covered: list[tuple[int, int]], cuts: list[int]) -> list[tuple[int, int]]:
    """Runs of segments (as cut offsets) that no box of a row covers."""
    index = {c: i for i, c in enumerate(cuts)}
    taken = [False] * len(cuts)
    for a, b in covered:
        for i in range(index[a], index[b]):
            taken[i] = True
    gaps, run_start = [], None
    for i, c in enumerate(cuts[:-1]):
        if taken[i]:
            if run_start is not None:
                gaps.append((run_start, c))
                run_start = None
        elif run_start is None:
            run_start = c
    if run_start is not None:
        gaps.append((run_start, cuts[-1]))
    return gaps


def _cell(piece: str, show_whitespace: bool) -> str:
    return whitespace(piece, show_whitespace, breaks=False)


def key_html(with_decision: bool = False) -> str:
    """The little key under a grid: what the vertical lines mean."""
    parts = [
        '<span class="el-edge-sample shared"></span>boundary every model has',
        '<span class="el-edge-sample missing"></span>boundary some model lacks (the line cuts through its token)',
    ]
    if with_decision:
        parts.append('<span class="el-edge-sample decision"></span>the decision point')
    return f'<div class="el-grid-key">{"".join(parts)}</div>'
