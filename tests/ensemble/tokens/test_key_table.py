"""Key tables and tokenizer comparison on the three real tokenizers."""

from __future__ import annotations

import unicodedata

from hypothesis import given, settings
from hypothesis import strategies as st

from ensemble.tokens.align import compare
from ensemble.tokens.key_table import EOS_KEY, display_key, is_complete, key_from_bytes, key_to_bytes

# Text that stresses tokenizers: emoji (multi-byte, ZWJ), CJK, combining marks, RTL, newlines, digits.
ALPHABET = st.sampled_from(
    list("abcXYZ  \n\t0123456789.,;:!?'\"-()") + ["é", "e\u0301", "ß", "中", "文", "語", "🙂", "👩\u200d💻", "ע", "ب", "\u200b", "Ω", "™", "  ", "\r\n"]
)
TEXT = st.lists(ALPHABET, min_size=0, max_size=40).map("".join)


def _normal(name: str, text: str) -> str:
    return unicodedata.normalize("NFC", text) if name == "qwen" else text  # Qwen's tokenizer applies NFC


def test_sofia_boundaries_match_the_paper(tables):
    result = compare("Sofia went to Plovdiv in 1999.", tables)
    pieces = {name: [t["text"] for t in info["tokens"]] for name, info in result["models"].items()}
    assert pieces["smollm2"][:3] == ["S", "of", "ia"]
    assert pieces["qwen"][:3] == ["S", "of", "ia"]
    assert pieces["gemma3"][0] == "Sofia"
    # The edges inside "Sofia" exist for the byte-BPE models only, so they are not shared.
    assert 1 not in result["shared_boundaries"] and 3 not in result["shared_boundaries"]
    assert 5 in result["shared_boundaries"]
    assert result["models"]["gemma3"]["missing"][:2] == [1, 3]
    assert 0 < result["agreement"] < 100


def test_keys_turn_markers_into_text(tables):
    assert tables["gemma3"].key(tables["gemma3"].encode(" went")[0]) == " went"
    assert tables["smollm2"].key(tables["smollm2"].encode(" went")[0]) == " went"
    assert tables["qwen"].key(tables["qwen"].encode("\n\n")[0]) == "\n\n"
    for table in tables.values():
        for eos in table.eos_ids:
            assert table.key(eos) == EOS_KEY


def test_byte_tokens_share_their_character(tables):
    result = compare("🙂", tables)
    smol = result["models"]["smollm2"]["tokens"]
    assert len(smol) == 2 and all(t["start"] == 0 and t["end"] == 1 and t["bytes"] for t in smol)
    assert [t["text"] for t in smol] == ["<0xF0><0x9F>", "<0x99><0x82>"]
    assert result["models"]["smollm2"]["boundaries"] == [0, 1]


def test_partial_keys_are_escaped_bytes(tables):
    key = key_from_bytes(b"\xf0\x9f")
    assert not is_complete(key) and key_to_bytes(key) == b"\xf0\x9f"
    assert display_key(key) == "<0xF0><0x9F>"
    assert display_key(EOS_KEY) == "<eos>"
    # A key a vocabulary lacks is encoded: whole characters by the tokenizer, stray bytes by byte tokens.
    ids = tables["gemma3"].encode_key(key_from_bytes(b"a" + b"\xf0"))
    assert b"".join(tables["gemma3"].text_bytes(i) for i in ids) == b"a\xf0"


@settings(max_examples=150)
@given(text=TEXT)
def test_keys_spell_the_text(tables, text):
    """Concatenating the keys of a tokenization gives back the text's bytes, for every tokenizer."""
    for name, table in tables.items():
        ids = table.encode(text)
        assert b"".join(table.text_bytes(i) for i in ids) == _normal(name, text).encode("utf-8")


@settings(max_examples=150)
@given(text=TEXT)
def test_alignment_invariants(tables, text):
    result = compare(text, tables)
    shared = set(result["shared_boundaries"])
    for info in result["models"].values():
        bounds = info["boundaries"]
        assert bounds == sorted(bounds)
        assert all(0 <= b <= len(text) for b in bounds)
        assert shared <= set(bounds)
        assert all(t["start"] <= t["end"] for t in info["tokens"])
    assert 0.0 <= result["agreement"] <= 100.0
    assert "".join(seg["text"] for seg in result["segments"]) == text


def test_bad_text_gives_a_result_or_a_message(tables):
    assert compare("", tables)["agreement"] == 100.0
    weird = "a\x00b\x01\x7f\u202ec\ud800d"
    result = compare(weird, tables)
    assert result["notes"] and "surrogate" in result["notes"][0]
    long = compare("word " * 20000, tables)
    assert long["models"]["gemma3"]["count"] > 10000


def test_the_ids_view_draws_every_byte_token_of_a_cjk_text_as_its_own_box(tables):
    """SmolLM2 spends byte tokens on CJK: the ids view shows each of them (with its id) inside its character's box."""
    import re

    import visual

    text = "東京は日本の首都で、人口が最も多い都市です。"
    result = compare(text, tables)
    smol = result["models"]["smollm2"]["tokens"]
    assert sum(t["bytes"] for t in smol) > len(text) // 2  # most of these characters cost SmolLM2 two tokens
    n_byte_tokens = sum(t["bytes"] for info in result["models"].values() for t in info["tokens"])
    plain = visual.tokenizers_html(result)
    with_ids = visual.tokenizers_html(result, show_ids=True)
    assert 'class="el-piece el-byte"' not in plain and "el-id" not in plain  # the default view is unchanged
    assert with_ids.count('class="el-piece el-byte"') == n_byte_tokens  # one small box per byte token
    drawn = re.findall(r'class="el-piece el-byte"><span>[^<]*</span><span class="el-id">(\d+)</span>', with_ids)
    byte_ids = [t["id"] for info in result["models"].values() for t in info["tokens"] if t["bytes"]]
    assert sorted(int(i) for i in drawn) == sorted(byte_ids)  # drawn block by block, so compare as multisets
    for info in result["models"].values():  # every token's id is drawn, whole tokens and byte tokens alike
        for t in info["tokens"]:
            assert f'<span class="el-id">{t["id"]}</span>' in with_ids
    smol_bytes = sum(t["bytes"] for t in smol)
    assert f"<b>smollm2</b> {len(smol)} tokens" in plain and f"{smol_bytes} byte tokens (parts of characters)" in plain
