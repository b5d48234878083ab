"""One model's tokens of the shared response text (``ensemble.tokens.response``): character spans of byte tokens, rolling
back, restoring, following another model, and the token edges the methods read, on the three real tokenizers.

The member tests (methods/test_member.py) check ``sync`` against a full re-tokenization through a model; these check
the bookkeeping itself, token by token, against the tokenizer's own spans.
"""

from __future__ import annotations

from itertools import pairwise

import pytest

from ensemble.tokens.key_table import KeyTable
from ensemble.tokens.response import ResponseTokens, _complete_prefix, common_prefix

# byte tokens (CJK, emoji with a skin tone and a ZWJ) between plain words; a space before a character that a
# byte-level tokenizer splits (SmolLM2's " 東" is "Ġæ" + "Ŀ" + "±")
TEXTS = ["Sofia went to Plovdiv in 1999.", "Sofia 🙂 東京 and 👩🏽‍💻 Пловдив", "x 普罗夫迪夫 𠀋 end"]


def spelled(keys: KeyTable, ids: list[int]) -> ResponseTokens:
    """A fresh response that appended ``ids`` one at a time."""
    response = ResponseTokens(keys, "m")
    response.begin(keys.encode("Q: where?\nA:"))
    for token_id in ids:
        response.append(token_id)
    return response


def state(response: ResponseTokens) -> tuple:
    spans = response.spans()
    return response.ids, response.text, response.finished, spans.starts, spans.ends


@pytest.mark.parametrize("text", TEXTS)
def test_appended_tokens_spell_the_text_with_the_tokenizers_own_spans(tables, text):
    inside = 0
    for keys in tables.values():
        ids = keys.encode(text)
        response = ResponseTokens(keys, "m")
        response.begin(keys.encode("Q:"))
        pieces = [response.append(token_id) for token_id in ids]
        assert "".join(pieces) == response.text == text and response.finished
        assert response.all_ids() == keys.encode("Q:") + ids and response.prompt_len == len(keys.encode("Q:"))
        expected = keys.spans(text)
        spans = response.spans()
        assert (spans.ids, spans.starts, spans.ends, spans.length) == (expected.ids, expected.starts, expected.ends, len(text))
        for i in range(len(pieces)):
            end = response.token_end(i)
            # a token that ends inside a character completes nothing of it: its edge is no character boundary
            assert (end is None) == (i + 1 < len(ids) and response.token_start(i + 1) is None)
            if end is None:
                inside += 1
                assert response.covered(i) == len("".join(pieces[: i + 1]))
            else:
                assert end == len("".join(pieces[: i + 1])) == response.covered(i)
    if text != TEXTS[0]:
        assert inside > 0  # the byte path was exercised on some tokenizer


def test_a_response_is_unfinished_while_a_characters_bytes_are_pending(tables):
    for keys in tables.values():
        ids = keys.encode("東")
        if len(ids) < 2:
            continue
        response = spelled(keys, ids[:1])
        assert response.text == "" and not response.finished and response.token_end(0) is None
        assert response.append_ids(ids[1:]) == "東" and response.finished
        break
    else:
        pytest.fail("no tokenizer splits 東 into bytes: the test reads nothing")


@pytest.mark.parametrize("text", TEXTS[1:])
def test_truncating_rolls_back_to_the_state_of_the_shorter_response(tables, text):
    """A rolled-back response is in the state of the shorter response spelled afresh, wherever the cut falls: at a
    character boundary, or inside a character (its bytes wait again, and a kept token that spells a space before
    them, " \\xe4", keeps its space in the text), and spelling the rest restores the whole."""
    cut_inside = 0
    for keys in tables.values():
        ids = keys.encode(text)
        for k in range(len(ids) + 1):
            response = spelled(keys, ids)
            response.truncate_tokens(k)
            assert response.ids == ids[:k]
            assert state(response) == state(spelled(keys, ids[:k])), (keys, k)
            cut_inside += spelled(keys, ids).token_end(k - 1) is None if k else 0
            response.append_ids(ids[k:])
            assert state(response) == state(spelled(keys, ids))
        whole = spelled(keys, ids)
        whole.truncate_tokens(len(ids) + 3)  # past the end: nothing to roll back
        assert state(whole) == state(spelled(keys, ids))
    assert cut_inside > 0  # some cut fell inside a character


def test_restore_and_follow(tables):
    """``restore`` gives the state of spelling those ids afresh; ``follow`` copies a leader's very ids when the
    tokenizer is the same (even a tokenization the tokenizer would not choose) and re-tokenizes its text otherwise."""
    qwen, smollm2 = tables["qwen"], tables["smollm2"]
    leader = spelled(qwen, [i for c in "Sofia 東京" for i in qwen.encode(c)])  # a token per character
    assert leader.text == "Sofia 東京" and leader.ids != qwen.encode(leader.text)  # not the canonical tokenization
    same = spelled(qwen, qwen.encode("Sofia went"))
    same.follow(leader)
    assert state(same) == state(leader)
    other = spelled(smollm2, smollm2.encode("Sofia went"))
    other.follow(leader)
    assert other.text == leader.text and other.ids == smollm2.encode(leader.text) and other.finished
    earlier = spelled(qwen, [])
    earlier.follow(leader, ids=leader.ids[:2], text="ignored: the same tokenizer takes the ids")
    assert state(earlier) == state(spelled(qwen, leader.ids[:2]))
    alone = spelled(smollm2, [])
    alone.follow(None, text="Plovdiv")
    assert alone.ids == smollm2.encode("Plovdiv")
    target = qwen.encode("Sofia 東京 in 1999")
    back = spelled(qwen, target[:3] + qwen.encode(" nowhere"))
    back.restore(target)
    assert state(back) == state(spelled(qwen, target))


def test_a_continuation_is_tokenized_as_it_follows_the_text(tables):
    """A candidate after the text is cut as the whole text would be (the junction may re-merge the last tokens)."""
    for keys in tables.values():
        for text, addition in (("Sofia went to Plov", "div"), ("Sofia 東", "京"), ("in 19", "99."), ("", "Sofia")):
            response = spelled(keys, keys.encode(text))
            kept, ids = response.continuation_ids(addition)
            assert response.ids[:kept] + ids == keys.encode(text + addition)
            assert kept <= len(response.ids) and response.text == text  # reading it changes nothing


@pytest.mark.parametrize("text", TEXTS[1:])
def test_edges_and_boundaries_name_where_tokens_start(tables, text):
    for keys in tables.values():
        response = spelled(keys, keys.encode(text))
        n = len(response.ids)
        starts = {i: response.token_start(i) for i in range(n)}
        edges = sorted({0} | {end for _, end in response.edges_from(0)})
        assert edges == response.spans().boundaries()
        assert list(response.edges_from(3)) == [(i, response.token_end(i)) for i in range(3, n) if response.token_end(i) is not None]
        for offset in range(len(text) + 1):
            assert response.edge_at_or_before(offset) == max(e for e in edges if e <= offset)
            first = {}
            for i in range(n):
                if starts[i] is not None and starts[i] >= offset:
                    first.setdefault(starts[i], i)
            assert response.boundaries_from(offset) == first | {len(text): None}


def test_the_tokens_near_an_offset_show_each_character_once(tables):
    text = TEXTS[1]
    for keys in tables.values():
        response = spelled(keys, keys.encode(text))
        near = response.tokens_near(8, window=4)
        assert near and all(piece == text[start:end] for piece, start, end in near)
        assert all(a[2] == b[1] for a, b in pairwise(near))  # side by side, no character twice
        assert near[0][1] < 8 < near[-1][2] and near[0][2] > 8 - 4 and near[-1][1] < 8 + 4
        assert [p for p, *_ in response.tokens_near(0, window=len(text) + 1)] == [
            text[s:e] for s, e in sorted(set(zip(response.spans().starts, response.spans().ends, strict=True)))]
    unfinished = spelled(tables["smollm2"], tables["smollm2"].encode("ab 東")[:-1])
    assert unfinished.tokens_near(3)[-1][0].endswith("\ufffd")  # a character still missing bytes is shown as such


def test_common_prefix_and_complete_utf8_prefix():
    assert common_prefix("Sofia went", "Sofia goes") == 6 and common_prefix("", "x") == 0 and common_prefix("ab", "ab") == 2
    assert common_prefix([1, 2, 3, 4], [1, 2, 9]) == 2 and common_prefix("a" * 1000 + "b", "a" * 1000 + "c") == 1000
    assert _complete_prefix("東".encode()) == 3 and _complete_prefix("a東".encode()[:3]) == 1  # held back: 2 of 3 bytes
    assert _complete_prefix("🙂".encode()[:3]) == 0 and _complete_prefix(b"ab") == 2 and _complete_prefix(b"") == 0
    assert _complete_prefix(b"a\xff") == 2 and _complete_prefix(b"\x80\x80") == 2  # invalid bytes count as complete
    assert _complete_prefix(b"\xf8\x80") == 2 and _complete_prefix("é".encode()[:1]) == 0
