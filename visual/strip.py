"""The annotated token strip: the response text with one coloured span per token, streamed append-only.

One ``<span class="el-tok DECISION" data-i=N title=...>`` per token group: byte tokens that together make one
character share that character's span in the trace and are drawn once (a character is never split), and a
record that adds no text (a control token) is drawn as a small marker, and the end of sequence (the last,
zero-width ``<eos>`` record of a run that stopped by itself) as an end marker. The app wraps the chunks in its
own container (``<div class="el-strip">``) and handles clicks through ``data-i``.
"""

from __future__ import annotations

from collections.abc import Iterable

from ensemble.capabilities import is_one_model, is_segments
from ensemble.tokens.key_table import display_key
from ensemble.trace import ConsensusDetails, Decision, GatedDetails, OovBlockedDetails, RunTrace, TokenRecord

from . import records as rd
from .escape import safe, whitespace
from .numbers import number_text
from .style import CONSENSUS_KINDS, DECISION_LABELS, END_MARKER, legend_html, model_class

ZERO_WIDTH_MARKER = "◦"
DRAFT_GLYPHS = str.maketrans({" ": "·", "\t": "→", "\n": "↵", "\r": "␍"})
"""A replaced draft's whitespace as the strip draws it (the draft is shown from an attribute, as plain text)."""


FENCE = "```"


def in_code(text: str, start: int, end: int) -> bool:
    """Whether the characters ``start:end`` of ``text`` are code: inside a ``` fence (or the fence itself). Reads only
    ``text[:end]``, so a streamed strip draws a token the same before and after the rest of the answer arrives."""
    return text.count(FENCE, 0, start) % 2 == 1 or FENCE in text[max(0, start - 2) : end]


def token_groups(tokens: list[TokenRecord]) -> list[list[TokenRecord]]:
    """Consecutive records with the same non-empty span (byte tokens of one character) form one group."""
    groups: list[list[TokenRecord]] = []
    for record in tokens:
        last = groups[-1][0] if groups else None
        if last is not None and record.start < record.end and (last.start, last.end) == (record.start, record.end):
            groups[-1].append(record)
        else:
            groups.append([record])
    return groups


def group_of(tokens: list[TokenRecord], position: int) -> list[TokenRecord]:
    """The group that holds ``tokens[position]``."""
    for group in token_groups(tokens):
        if any(r is tokens[position] for r in group):
            return group
    return [tokens[position]]


def _fmt(p) -> str:
    return number_text(p, 2, missing="?")


def _is_byte_piece(record: TokenRecord, piece: str) -> bool:
    return record.start < record.end and "<0x" in record.text and record.text != piece


def token_summary(record: TokenRecord, piece: str | None = None, text_len: int | None = None) -> str:
    """A one-line plain-text summary of a record (the strip's tooltip; escape it before use).

    Args:
        text_len: length of the response (so far); tells the end of sequence from a control token.
    """
    d = record.details
    kind = CONSENSUS_KINDS.get(str(record.condition)) if record.decision == Decision.CONSENSUS else None
    head = f"#{record.index} {kind[1] if kind else DECISION_LABELS.get(record.decision, record.decision)}"
    parts = [head]
    if record.condition and not kind:
        parts.append(str(record.condition))
    parts.append(str(record.model))
    if isinstance(d, OovBlockedDetails) and rd.names(d.blocked_by):
        parts.append("no token edge in " + ", ".join(rd.names(d.blocked_by)))
    elif isinstance(d, ConsensusDetails) and d.mean_prob is not None:
        parts.append(f"mean p {_fmt(d.mean_prob)}")
    elif record.decision == Decision.ENSEMBLED_REPLACED and record.fusion is not None:
        parts.append(f"draft {record.fusion.draft!r} → {record.fusion.choice!r}")
    elif record.decision in (Decision.ENSEMBLED_KEPT, Decision.FUSED) and record.fusion is not None:
        parts.append(f"fused choice {record.fusion.choice!r}")
    elif isinstance(d, GatedDetails) and d.primary_top is not None:
        parts.append(f"top p {_fmt(d.primary_top)} > gate {_fmt(d.gate)}")
    elif record.decision == Decision.SEGMENT and record.round is not None:
        parts.append(f"round {record.round}")
    elif top := rd.pairs(record.topk):
        parts.append(f"p {_fmt(top[0][1])}" if top[0][0] == record.text else "")
    if text_len is not None and rd.is_end(record, text_len):
        parts.append("end of the answer (end-of-sequence token)")
    elif record.start == record.end:
        parts.append(f"adds no text ({display_key(record.text) or 'control token'})")
    elif piece is not None and _is_byte_piece(record, piece):
        parts.append("byte tokens of one character")
    return " · ".join(p for p in parts if p)


class StripBuilder:
    """Builds the strip chunk by chunk while a run streams.

    Args:
        method: the run's method (``trace.method``).
        models: the run's models (``trace.models``), for the ``model-N`` classes of SpecEM.
        show_whitespace: draw spaces, tabs and newlines as ``·``, ``→``, ``↵``.

    :meth:`add` returns only the HTML of the new records, so ``"".join`` of every chunk equals
    :func:`strip_html` of the finished trace, however the records were batched.
    """

    def __init__(self, method: str, models: list[str], show_whitespace: bool = True):
        self.method = method
        self.models = list(models)
        self.show_whitespace = show_whitespace
        self._last_span: tuple[int, int] | None = None
        self._last_round: int | None = None

    def add(self, records: Iterable[TokenRecord], text: str) -> str:
        """HTML for ``records`` (new TokenRecords, in order); ``text`` is the response so far."""
        parts = []
        for record in records:
            span = (record.start, record.end)
            if record.start < record.end and span == self._last_span:
                continue  # one more byte token of the character already drawn
            parts.append(self._render(record, text))
            if record.start < record.end:
                self._last_span = span
        return "".join(parts)

    def _render(self, record: TokenRecord, text: str) -> str:
        classes = ["el-tok", record.decision]
        if record.decision == Decision.CONSENSUS and record.condition == "confident":
            classes.append("confident")  # only the mean agreed: drawn apart from a unanimous consensus
        if is_segments(self.method) or record.decision == "segment":
            classes.append(model_class(self.models, record.model))
        if record.round is not None and record.round != self._last_round:
            if self._last_round is not None:
                classes.append("round-start")
            self._last_round = record.round
        piece = text[record.start : record.end]
        if in_code(text, record.start, record.end):
            classes.append("code")
        if rd.is_end(record, len(text)):
            classes += ["zw", "eos"]
            body = END_MARKER
        elif record.start == record.end:
            classes.append("zw")
            body = ZERO_WIDTH_MARKER
        else:
            if _is_byte_piece(record, piece):
                classes.append("bytes")
            body = whitespace(piece, self.show_whitespace)
        title = token_summary(record, piece, len(text))
        cls = " ".join(safe(c) for c in classes if c)
        # the draft a fused key replaced: the live strip draws it struck before its replacement (style.py, .el-draft)
        was = record.fusion.draft if record.decision == Decision.ENSEMBLED_REPLACED and record.fusion else None
        draft = f' data-draft="{safe(was.translate(DRAFT_GLYPHS))}"' if was else ""
        return f'<span class="{cls}" data-i="{int(record.index)}"{draft} title="{safe(title)}">{body}</span>'


def draft_html(text: str, start: int, end: int, model: str, round_index: int, show_whitespace: bool = True) -> str:
    """A drafted token being checked (SAFE, while the run streams): ``text[start:end]`` in the quiet provisional style
    (``el-draft``, no ``data-i``: nothing to click, not counted as a token). The strip's CSS hides it as soon as a
    verified token follows it, so appending the round's decided tokens turns the drafts into their decisions and the
    streamed strip stays append-only."""
    title = f"being checked: {model}'s draft in round {round_index}, not verified yet"
    code = " code" if in_code(text, start, end) else ""
    return f'<span class="el-draft{code}" title="{safe(title)}">{whitespace(text[start:end], show_whitespace)}</span>'


def kept_html(trace: RunTrace, show_whitespace: bool = True) -> str:
    """A fork's kept text (what the run it forks had written before the fork point), drawn plain before the
    fork's own tokens; "" for a run that is not a fork."""
    fork = trace.fork
    if not fork or not fork.get("chars"):
        return ""
    title = (f"kept from the {fork.get('method')} run on {', '.join(map(str, fork.get('models', [])))} "
             f"(its tokens #0–#{int(fork.get('at', 0)) - 1}); the fork wrote what follows")
    return f'<span class="el-kept" title="{safe(title)}">{whitespace(trace.text[: int(fork["chars"])], show_whitespace)}</span>'


def strip_html(trace: RunTrace, show_whitespace: bool = True) -> str:
    """The whole strip of a finished (or replayed) trace (a fork's kept text first)."""
    return kept_html(trace, show_whitespace) + StripBuilder(trace.method, trace.models, show_whitespace).add(trace.tokens, trace.text)


def records_drawn(records, elements: int) -> int:
    """How many of ``records`` the first ``elements`` tokens of a strip draw (the byte tokens of one character
    are drawn as one, :class:`StripBuilder`): what a viewer who counted ``elements`` had on screen."""
    drawn, last = 0, None
    for i, record in enumerate(records):
        span = (record.start, record.end)
        if record.start < record.end and span == last:
            continue
        if drawn == elements:
            return i
        drawn += 1
        last = span if record.start < record.end else last
    return len(records)


def first_divergence(texts: list[str]) -> int | None:
    """The first character where the texts are not all equal (None when they are, or there is one)."""
    if len(texts) < 2 or all(t == texts[0] for t in texts):
        return None
    n = 0
    while all(n < len(t) for t in texts) and len({t[n] for t in texts}) == 1:
        n += 1
    return n


def compare_label(trace: RunTrace) -> str:
    """How a comparison names a run: its method, and for a single model which one."""
    return f"{trace.method} ({trace.models[0]})" if is_one_model(trace.method) and trace.models else trace.method


def _strip_marked(trace: RunTrace, at: int | None) -> str:
    """The strip with a bar before the token that holds character ``at`` (where the runs part)."""
    if at is None:
        return strip_html(trace)
    builder = StripBuilder(trace.method, trace.models)
    before = [t for t in trace.tokens if t.end <= at]
    after = trace.tokens[len(before):]
    mark = '<span class="el-fork-split" title="the first character where the runs differ"></span>'
    return kept_html(trace) + builder.add(before, trace.text) + mark + builder.add(after, trace.text)


def identical_groups(traces: dict[str, RunTrace]) -> list[list[str]]:
    """The keys of ``traces`` whose texts are equal, in groups of two or more (in the order of ``traces``)."""
    groups: dict[str, list[str]] = {}
    for key, trace in traces.items():
        groups.setdefault(trace.text, []).append(key)
    return [keys for keys in groups.values() if len(keys) > 1]


def _names(labels: list[str]) -> str:
    return labels[0] if len(labels) == 1 else ", ".join(labels[:-1]) + " and " + labels[-1]


def compare_html(traces: dict[str, RunTrace]) -> str:
    """The Compare tab's cards: per run its label (a single model named), warnings, legend and strip, side by
    side, the first character where the runs differ marked in every strip; runs whose texts are equal are called
    identical (in the note and on their cards). Each card carries ``data-run`` (its key in ``traces``) so a click
    on a token can name the run. A card is three rows of the cards' grid (head, legend, strip: ``subgrid``), so the
    strips of cards side by side start at one height however long each legend is, and the bars line up."""
    at = first_divergence([t.text for t in traces.values()])
    label = {key: compare_label(trace) for key, trace in traces.items()}
    groups = identical_groups(traces)
    note = ""
    if len(traces) > 1 and at is None:
        note = f'<p class="el-muted">The runs wrote identical texts ({len(next(iter(traces.values())).text)} characters).</p>'
    elif len(traces) > 1:
        same = "".join(f" {_names([label[k] for k in keys])} wrote identical texts." for keys in groups)
        note = f'<p class="el-muted">The runs agree on their first {at} character(s); the bar marks where they part.{safe(same)}</p>'
    twins = {key: [label[k] for k in keys if k != key] for keys in groups for key in keys}
    cards = []
    for key, trace in traces.items():
        badge = (f'<p class="el-compare-same">identical to {safe(_names(twins[key]))}</p>'
                 if key in twins and at is not None else "")
        cards.append(
            f'<div class="el-compare-card" data-run="{safe(key)}"><div class="el-compare-head"><h4>{safe(label[key])}</h4>'
            + (f'<p class="el-warning">{safe(" · ".join(trace.warnings))}</p>' if trace.warnings else "")
            + badge + "</div>"
            + trace_legend(trace)
            + f'<div class="el-strip">{_strip_marked(trace, at)}</div></div>'
        )
    return f'{note}<div class="el-compare">{"".join(cards)}</div>'


def trace_legend(trace: RunTrace) -> str:
    """The legend of a run: the decisions its method and settings can produce, and the end marker only when the
    answer ended by itself (its last record is the end of sequence), not when it hit the token budget."""
    ended = bool(trace.tokens) and rd.is_end(trace.tokens[-1], len(trace.text))
    return legend_html(trace.method, trace.models, trace.settings if isinstance(trace.settings, dict) else None, ended)
