"""One model's tokens of the shared response text, with the character span of each token. No torch here.

:class:`ResponseTokens` holds the prompt ids, the response ids, where each token ends in the text and whether
that edge is a character boundary (byte tokens of one character end inside it). Methods change the ids by
appending a token the model chose, truncating a rejected draft, restoring a saved list of ids, or re-syncing
to a new response text (a tail window re-tokenized); they read the state through the public methods below
(``token_start``, ``token_end``, ``edges_from``, ``boundaries_from``, ``finished``), never the lists.

The model side (:mod:`ensemble.members.runtime`) only ever sees ``all_ids()``: whatever prefix of it is cached is
reused. That split is the seam a member backend (another process, another runtime) plugs into.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterator, Sequence

from .key_table import KeyTable, Spans

SYNC_MARGIN = 4
"""Tokens re-tokenized before the first changed character when syncing; doubled until stable."""


class ResponseTokens:
    """A model's tokenization of one run's response.

    Args:
        keys: the model's key table (its tokenizer as text pieces).
        name: the name used in traces.
    """

    def __init__(self, keys: KeyTable, name: str):
        self.keys = keys
        self.name = name
        self.prompt_ids: list[int] = []
        self.clear()

    # -- state ------------------------------------------------------------------------------------------
    def clear(self) -> None:
        """Forget the response (the prompt stays)."""
        self.ids: list[int] = []
        self._ends: list[int] = []  # characters of ``text`` covered once token i is in
        self._clean: list[bool] = []  # the edge after token i is a character boundary
        self.text = ""
        self._pending = b""  # bytes of a character that the tokens so far have not finished

    def begin(self, prompt_ids: Sequence[int]) -> None:
        """Begin a run with these (templated) prompt ids and no response."""
        self.prompt_ids = list(prompt_ids) or self.keys.encode("\n")[:1]  # a model must condition on something
        self.clear()

    @property
    def prompt_len(self) -> int:
        return len(self.prompt_ids)

    @property
    def finished(self) -> bool:
        """True when the tokens end on a character boundary (no byte of a character is left pending)."""
        return not self._pending

    def all_ids(self) -> list[int]:
        return self.prompt_ids + self.ids

    def same_tokenizer(self, other: ResponseTokens) -> bool:
        return self.keys.same_as(other.keys)

    def token_start(self, i: int) -> int | None:
        """Character offset where response token ``i`` starts, None if it starts inside a character."""
        if i == 0:
            return 0
        return self._ends[i - 1] if self._clean[i - 1] else None

    def token_end(self, i: int) -> int | None:
        """Character offset where response token ``i`` ends, None if it ends inside a character."""
        return self._ends[i] if self._clean[i] else None

    def covered(self, i: int) -> int:
        """Characters of the text that are complete once token ``i`` is in (for a byte token: up to the start
        of its unfinished character)."""
        return self._ends[i]

    def edges_from(self, first: int) -> Iterator[tuple[int, int]]:
        """(index, end) of every token from ``first`` on that ends on a character boundary."""
        for i in range(first, len(self.ids)):
            if self._clean[i]:
                yield i, self._ends[i]

    def spans(self) -> Spans:
        """This model's current response tokens with character spans (byte tokens share their character)."""
        n = len(self.ids)
        starts = [0] * n
        for i in range(n):
            start = self.token_start(i)
            starts[i] = starts[i - 1] if start is None else start
        ends = [len(self.text)] * n
        for i in range(n - 2, -1, -1):
            ends[i] = self._ends[i] if self._clean[i] else ends[i + 1]
        return Spans(list(self.ids), starts, ends, len(self.text))

    def tokens_near(self, offset: int, window: int = 12) -> list[list]:
        """This model's tokens within ``window`` characters of ``offset`` as [text, start, end]; byte tokens
        of one character appear once, as that character (for the inspector: how each model cuts the text)."""
        i = max(0, bisect_right(self._ends, offset - window) - 1)
        while i > 0 and self.token_start(i) is None:
            i -= 1
        out: list[list] = []
        n = len(self.ids)
        while i < n:
            start = self.token_start(i)
            j = i
            while j < n - 1 and not self._clean[j]:
                j += 1
            end = self._ends[j] if self._clean[j] else len(self.text)
            if start >= offset + window:
                break
            if end > offset - window:
                piece = self.text[start:end] if self._clean[j] else self.text[start:] + "\ufffd"
                out.append([piece, start, end])
            i = j + 1
        return out

    def edge_at_or_before(self, offset: int) -> int:
        """Where this model's token that covers character ``offset`` starts: ``offset`` itself when a token starts
        there, else the last token edge before it (0 at the start of the response)."""
        i = bisect_right(self._ends, offset)  # tokens 0..i-1 end at or before ``offset``
        while i > 0 and not self._clean[i - 1]:
            i -= 1
        return self._ends[i - 1] if i > 0 else 0

    def boundaries_from(self, offset: int) -> dict[int, int | None]:
        """This model's token edges at or after character ``offset``: edge -> index of the token starting
        there (None for the end of the text)."""
        out: dict[int, int | None] = {}
        i = len(self.ids)
        while i > 0:
            start = self.token_start(i - 1)
            if start is not None and start < offset:
                break
            i -= 1
        for j in range(i, len(self.ids)):
            start = self.token_start(j)
            if start is not None and start >= offset and start not in out:
                out[start] = j
        if self.finished and len(self.text) >= offset:
            out.setdefault(len(self.text), None)
        return out

    def key_ids(self, key: str) -> list[int]:
        """Ids this model appends for a chosen key: its own token with that key if it has one."""
        return self.keys.encode_key(key)

    # -- changing the ids -------------------------------------------------------------------------------
    def truncate_tokens(self, k: int) -> None:
        """Keep the first ``k`` response tokens (rolls back a rejected draft)."""
        if k >= len(self.ids):
            return
        del self.ids[k:], self._ends[k:], self._clean[k:]
        last_clean = k
        while last_clean > 0 and not self._clean[last_clean - 1]:
            last_clean -= 1
        # the bytes after the last clean token: their complete characters are text (a kept token " \xe4" still
        # spells its space), the rest waits, exactly as if the kept tokens had been appended afresh
        data = b"".join(self.keys.text_bytes(t) for t in self.ids[last_clean:])
        done = _complete_prefix(data)
        self.text = (self.text[: self._ends[last_clean - 1]] if last_clean else "") + data[:done].decode("utf-8", "replace")
        self._pending = data[done:]

    def append(self, token_id: int) -> str:
        """Append one token this model chose; return the characters it completed ("" if none yet)."""
        self.ids.append(token_id)
        data = self._pending + self.keys.text_bytes(token_id)
        done = _complete_prefix(data)
        piece = data[:done].decode("utf-8", "replace")
        self._pending = data[done:]
        self.text += piece
        self._ends.append(len(self.text))
        self._clean.append(not self._pending)
        return piece

    def append_ids(self, token_ids: Sequence[int]) -> str:
        return "".join(self.append(t) for t in token_ids)

    def restore(self, ids: Sequence[int]) -> None:
        """Set the response ids to ``ids`` (e.g. a winning draft saved earlier); shared leading ids stay."""
        same = 0
        while same < len(self.ids) and same < len(ids) and self.ids[same] == ids[same]:
            same += 1
        self.truncate_tokens(same)
        self.append_ids(ids[same:])

    def follow(self, leader: ResponseTokens | None, ids: Sequence[int] | None = None, text: str | None = None) -> None:
        """Spell what ``leader`` spells (``ids`` and ``text``: what it spelled earlier, when it has moved on
        since): its very ids when the tokenizer is the same, so the cache and the distributions condition on
        the same tokens, otherwise this model's own tokenization of the text. With no leader, ``text`` is
        tokenized. The one place the rule "same tokenizer: restore, else sync" lives."""
        if leader is not None and self.same_tokenizer(leader):
            self.restore(leader.ids if ids is None else ids)
        else:
            self.sync(leader.text if text is None else text)

    def sync(self, text: str) -> None:
        """Make the response ids spell ``text``, re-tokenizing only a tail window.

        Tokens that end at least :data:`SYNC_MARGIN` tokens before the first changed character are kept;
        the window after them is re-tokenized. The window is accepted when its first token reproduces the
        old token there (so the change did not reach back across the window's start); otherwise the window
        doubles, down to a full re-tokenization. The result equals tokenizing ``text`` from scratch (tested).
        """
        if text == self.text and self.finished:
            return
        k0, start, tail = self._retokenize(text)
        self.truncate_tokens(k0)
        self.text = text[:start]
        self._pending = b""
        for i, token_id in enumerate(tail.ids):
            self.ids.append(token_id)
            edge = tail.ends[i]
            clean = i + 1 == len(tail.ids) or tail.starts[i + 1] != tail.starts[i]
            self._ends.append(start + edge if clean else start + tail.starts[i])
            self._clean.append(clean)
        self.text = text

    def _retokenize(self, text: str) -> tuple[int, int, Spans]:
        """Tokenize ``text`` reusing this model's tokens: (tokens kept, character where the tail starts, tail)."""
        p = common_prefix(self.text, text)
        k = bisect_right(self._ends, p)
        while k > 0 and not self._clean[k - 1]:
            k -= 1
        margin = SYNC_MARGIN
        while True:
            k0 = max(0, k - margin)
            while k0 > 0 and not self._clean[k0 - 1]:
                k0 -= 1
            start = self._ends[k0 - 1] if k0 else 0
            tail = self.keys.spans(text[start:])
            if k0 == 0 or (
                tail.ids and tail.ids[0] == self.ids[k0] and self._clean[k0] and start + tail.ends[0] == self._ends[k0]
            ):
                return k0, start, tail
            margin *= 2

    def continuation_ids(self, addition: str) -> tuple[int, list[int]]:
        """How this model tokenizes its text followed by ``addition``: the number of its current tokens that
        stay (the context) and the ids after them. The last tokens of the text may be re-merged (a junction),
        so a candidate is tokenized as it would really follow the text, not in isolation."""
        k0, _, tail = self._retokenize(self.text + addition)
        same = 0
        old = self.ids[k0:]
        while same < len(old) and same < len(tail.ids) and old[same] == tail.ids[same]:
            same += 1
        return k0 + same, list(tail.ids[same:])


def common_prefix(a: Sequence, b: Sequence) -> int:
    """Length of the longest common prefix of two strings or lists (binary search over C-speed slice
    comparisons)."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo



def _complete_prefix(data: bytes) -> int:
    """Length of the longest prefix of ``data`` that does not end inside a UTF-8 character.

    Invalid bytes count as complete (they decode to U+FFFD); only a valid but unfinished trailing
    sequence is held back.
    """
    n = len(data)
    for back in range(1, min(4, n) + 1):
        b = data[n - back]
        if b < 0x80:
            return n
        if b >= 0xC0:  # lead byte: how long should its sequence be?
            need = 2 if b < 0xE0 else 3 if b < 0xF0 else 4
            return n - back if back < need and b < 0xF8 else n
    return n
