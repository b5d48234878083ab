"""Key tables: the exact text each token appends after a boundary.

Keys are where the vocabularies of different models meet (SAFE §2, UniTE, GaC): SentencePiece's ``▁``
and byte-BPE's ``Ġ``/``Ċ`` become real spaces and newlines, byte tokens become their bytes. A key is a
``str``; bytes that do not form a whole UTF-8 character are kept with ``surrogateescape`` (so one byte
token of ``🙂`` in Qwen and Gemma's ``<0xF0>`` have the same key). Every model's end-of-sequence tokens
share :data:`EOS_KEY`; other control tokens (``<|im_start|>``, ``<start_of_turn>``, ...) get a control key
(:data:`CONTROL` + their name: models that share a control token share its key) and append no text.

This module also tokenizes text with character spans, which the adapters and the tokenizer comparison use.
"""

from __future__ import annotations

import bisect
import json
import re
from collections import Counter
from dataclasses import dataclass

EOS_KEY = "\uffff<eos>"
"""The one key that every model's end-of-sequence tokens map to (U+FFFF is a non-character)."""

CONTROL = "\uffff<ctrl>"
"""Prefix of control-token keys: these tokens append no text."""

_BYTE_TOKEN = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")
_ESCAPED_BYTE = re.compile(r"[\udc80-\udcff]")

MAX_PROMPT_CHARS = 200_000
"""Longest text accepted at all, declared once: prompts (``clean_prompt``; longer than a model's context they are
trimmed later, with a warning) and texts to tokenize (``align.compare``: the Tokenizers tab, ``/tokenize``, the CLI)."""


def replace_lone_surrogates(text: str) -> tuple[str, bool]:
    """Text that can be encoded as UTF-8: lone surrogates (halves of UTF-16 pairs) become '?'."""
    try:
        text.encode("utf-8")
        return text, False
    except UnicodeEncodeError:
        return text.encode("utf-8", "replace").decode("utf-8"), True


def key_from_bytes(data: bytes) -> str:
    """The key of a byte string: UTF-8 text, with bytes of incomplete characters kept as escapes."""
    return data.decode("utf-8", "surrogateescape")


def key_to_bytes(key: str) -> bytes:
    """Inverse of :func:`key_from_bytes`."""
    return key.encode("utf-8", "surrogateescape")


def is_control(key: str | None) -> bool:
    """True for keys that append no text: end of sequence and control tokens."""
    return key is not None and key.startswith("\uffff")


def is_complete(key: str) -> bool:
    """True when the key is whole characters (no escaped byte of a split character)."""
    return is_control(key) or not _ESCAPED_BYTE.search(key)


def display_key(key: str | None) -> str:
    """A printable form of a key: escaped bytes as ``<0xE4>``, the shared EOS as ``<eos>``."""
    if key is None:
        return "<none>"
    if key == EOS_KEY:
        return "<eos>"
    if key.startswith(CONTROL):
        return key[len(CONTROL) :]
    return _ESCAPED_BYTE.sub(lambda m: f"<0x{ord(m.group()) - 0xDC00:02X}>", key)


def _decodes(data: bytes) -> bool:
    try:
        data.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def gpt2_byte_alphabet() -> dict[str, int]:
    """Map each printable stand-in character of byte-level BPE back to its byte.

    Byte-level BPE (GPT-2, Qwen, SmolLM2) writes every byte as a printable character: bytes that are
    printable Latin-1 stand for themselves, the other 68 are shifted to code points 256 and up, in order.
    """
    printable = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    alphabet = {chr(b): b for b in printable}
    shift = 0
    for b in range(256):
        if b not in printable:
            alphabet[chr(256 + shift)] = b
            shift += 1
    return alphabet


def _decoder_types(node) -> list[str]:
    """Every ``type`` in a tokenizers decoder description, nested sequences included."""
    if isinstance(node, dict):
        found = [node["type"]] if "type" in node else []
        for value in node.values():
            found += _decoder_types(value)
        return found
    if isinstance(node, list):
        return [t for item in node for t in _decoder_types(item)]
    return []


@dataclass(frozen=True)
class Spans:
    """A tokenization of a text: ids and the character span of each token.

    Tokens that are bytes of one character share that character's span. ``starts`` are non-decreasing;
    a character offset is a boundary of this tokenization when some token starts there (or it is the end).
    """

    ids: list[int]
    starts: list[int]
    ends: list[int]
    length: int

    def boundaries(self) -> list[int]:
        """Sorted character offsets where this tokenization has a token edge, 0 and the end included."""
        found = sorted(set(self.starts) | {0, self.length})
        return found


class KeyTable:
    """Per-tokenizer table: token id -> key, plus the tokenization helpers built on it.

    Args:
        tokenizer: a transformers tokenizer with a ``backend_tokenizer`` (any fast tokenizer).
        vocab_size: rows of the model's output layer (may exceed the tokenizer's size).
        eos_ids: ids that end a response; they all get :data:`EOS_KEY`.
    """

    def __init__(self, tokenizer, vocab_size: int, eos_ids: set[int]):
        self.tokenizer = tokenizer
        self.backend = tokenizer.backend_tokenizer
        self.vocab_size = vocab_size
        self.eos_ids = frozenset(i for i in eos_ids if i is not None and 0 <= i < vocab_size)
        self.scheme = self._detect_scheme()
        self.keys: list[str] = self._build_keys()
        # key -> id for the (vast majority of) keys held by one token; keys held by several ids listed apart
        self._single: dict[str, int] = {}
        for token_id in range(len(self.keys) - 1, -1, -1):  # reversed: the first id of a key wins
            self._single[self.keys[token_id]] = token_id
        self._shared: dict[str, list[int]] = {}
        if len(self._single) != len(self.keys):
            counts = Counter(self.keys)
            repeated = {k for k, c in counts.items() if c > 1}
            for token_id, key in enumerate(self.keys):
                if key in repeated:
                    self._shared.setdefault(key, []).append(token_id)
        self.byte_ids: list[int | None] = [self._single.get(key_from_bytes(bytes([b]))) for b in range(256)]

    # -- building -----------------------------------------------------------------------------------------
    def _detect_scheme(self) -> str:
        decoder = self.backend.decoder
        types = _decoder_types(json.loads(decoder.__getstate__())) if decoder is not None else []
        if "ByteLevel" in types:
            return "bytelevel"
        if "ByteFallback" in types or "Metaspace" in types or "Replace" in types:
            return "sentencepiece"
        return "decode"

    def _build_keys(self) -> list[str]:
        # Ids the tokenizer does not know (padding rows of the output layer) are controls too.
        keys = [f"{CONTROL}<id:{i}>" for i in range(self.vocab_size)]
        vocab = self.backend.get_vocab(with_added_tokens=False)
        # Byte-level stand-ins -> Latin-1 characters, so one translate + encode gives a token's bytes.
        to_latin1 = {ord(ch): b for ch, b in gpt2_byte_alphabet().items()} if self.scheme == "bytelevel" else None
        for token, token_id in vocab.items():
            if 0 <= token_id < self.vocab_size:
                keys[token_id] = self._token_key(token, token_id, to_latin1)
        for token_id, added in self.tokenizer.added_tokens_decoder.items():
            if 0 <= token_id < self.vocab_size:
                keys[token_id] = CONTROL + added.content if added.special else added.content
        for token_id in self.eos_ids:
            keys[token_id] = EOS_KEY
        return keys

    def _token_key(self, token: str, token_id: int, to_latin1: dict[int, int] | None) -> str:
        if to_latin1 is not None:
            try:
                return key_from_bytes(token.translate(to_latin1).encode("latin-1"))
            except UnicodeEncodeError:  # a token outside the byte alphabet: literal text
                return token
        if self.scheme == "sentencepiece":
            if token.startswith("<0x") and (byte := _BYTE_TOKEN.match(token)):
                return key_from_bytes(bytes([int(byte.group(1), 16)]))
            return token.replace("\u2581", " ")
        # Unknown decoder: the text this token adds after an anchor token.
        anchor = self.tokenizer.convert_tokens_to_ids("a")
        base = self.tokenizer.decode([anchor])
        return self.tokenizer.decode([anchor, token_id])[len(base):]

    # -- lookups ------------------------------------------------------------------------------------------
    def key(self, token_id: int) -> str:
        return self.keys[token_id] if 0 <= token_id < self.vocab_size else f"{CONTROL}<id:{token_id}>"

    def text_bytes(self, token_id: int) -> bytes:
        """Bytes a token appends to the response (nothing for control and EOS tokens)."""
        key = self.key(token_id)
        return b"" if is_control(key) else key_to_bytes(key)

    def ids_for_key(self, key: str) -> list[int]:
        """Every id whose key is exactly ``key`` (usually one)."""
        shared = self._shared.get(key)
        if shared is not None:
            return shared
        token_id = self._single.get(key)
        return [] if token_id is None else [token_id]

    @property
    def most_ids_per_key(self) -> int:
        """The most ids any one key has (bounds a key's probability from its ids' bounds)."""
        return max((len(ids) for ids in self._shared.values()), default=1)

    def ids_with_prefix(self, key: str) -> list[int]:
        """Every id whose key starts with ``key`` (itself included), in key order: one slice of the sorted keys."""
        if not hasattr(self, "_sorted"):
            order = sorted(range(len(self.keys)), key=self.keys.__getitem__)
            self._sorted = (order, [self.keys[i] for i in order])
        order, ordered = self._sorted
        lo = bisect.bisect_left(ordered, key)
        hi = bisect.bisect_left(ordered, key + "\U0010ffff", lo)
        return order[lo:hi]

    @property
    def fingerprint(self) -> int:
        """Equal for tokenizers that cut every text the same way (same keys, normalizer, pre-tokenizer)."""
        if not hasattr(self, "_fingerprint"):
            parts = [
                getattr(self.backend, name).__getstate__() if getattr(self.backend, name) is not None else b""
                for name in ("normalizer", "pre_tokenizer")
            ]
            self._fingerprint = hash((self.scheme, tuple(self.keys), *parts))
        return self._fingerprint

    def same_as(self, other: KeyTable) -> bool:
        return self is other or self.fingerprint == other.fingerprint

    def encode_key(self, key: str) -> list[int]:
        """This tokenizer's ids for a key that follows a boundary (the key itself when it is one token)."""
        if key == EOS_KEY:
            return [min(self.eos_ids)] if self.eos_ids else []
        ids = self.ids_for_key(key)
        if ids:
            return [ids[0]]
        if is_control(key):
            return []  # a control token this vocabulary lacks: nothing to append
        if is_complete(key):
            return self.encode(key)
        raw = key_to_bytes(key)
        cut = len(raw)
        while cut and not _decodes(raw[:cut]):
            cut -= 1
        # Whole characters through the tokenizer, the stray bytes through this vocabulary's byte tokens.
        out = self.encode(raw[:cut].decode("utf-8"))
        out += [self.byte_ids[b] for b in raw[cut:] if self.byte_ids[b] is not None]
        return out

    def first_token_of(self, key: str) -> int | None:
        """UniTE's fallback: the first token of this tokenizer's encoding of a key it lacks."""
        ids = self.encode_key(key)
        return ids[0] if ids else None

    # -- tokenizing text ----------------------------------------------------------------------------------
    def encode(self, text: str) -> list[int]:
        if not text:
            return []
        return self.backend.encode(text, add_special_tokens=False).ids

    def spans(self, text: str) -> Spans:
        """Tokenize ``text`` (no special tokens) with the character span of every token."""
        if not text:
            return Spans([], [], [], 0)
        enc = self.backend.encode(text, add_special_tokens=False)
        ids = list(enc.ids)
        # Group tokens whose character ranges overlap: byte tokens of one character, or a token holding a
        # space plus the first byte of the next character (SmolLM2 " 東" = "Ġæ" + "Ŀ" + "±"). A group shares
        # one span; an edge inside a group falls inside a character and is no boundary. A group runs to the
        # next group's start, so characters a normalizer folded (NFC) stay with the token that holds them.
        groups: list[list[int]] = []  # [first token, last token, start, max end]
        for i, (start, end) in enumerate(enc.offsets):
            if groups and (start < groups[-1][3] or start <= groups[-1][2]):
                groups[-1][1] = i
                groups[-1][3] = max(groups[-1][3], end)
            else:
                groups.append([i, i, start, end])
        starts = [0] * len(ids)
        ends = [0] * len(ids)
        for g, (first, last, start, _) in enumerate(groups):
            end = groups[g + 1][2] if g + 1 < len(groups) else len(text)
            for i in range(first, last + 1):
                starts[i], ends[i] = start, end
        return Spans(ids, starts, ends, len(text))
