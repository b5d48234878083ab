"""Answer extraction on outputs that look like what small chat models write for GSM8K questions."""

from __future__ import annotations

import pytest

from ensemble.evaluation.answers import extract_answer, gold_answer, normalize_number, same_number

CASES = [
    # the instructed ending
    ("Janet has 16 - 3 - 4 = 9 eggs left. She sells them for $2 each, so 9 * 2 = 18.\nThe answer is 18.", "18"),
    ("She makes 9 * $2 = $18 every day.\n\nThe answer is $18.", "18"),
    ("Natalia sold 48 / 2 = 24 clips in May.\nAltogether she sold 48 + 24 = 72 clips.\nThe answer is 72 clips.", "72"),
    ("So the total is 2 + 1 = 3 bolts.\n\n**The answer is 3.**", "3"),
    ("The answer is **70,000** dollars.", "70000"),
    ("THE ANSWER IS: 540 meters", "540"),
    ("Profit = 200,000 - 130,000 = 70,000\nThe final answer is $70,000.", "70000"),
    ("Each ticket costs $3.50, so the answer is 3.50.", "3.5"),
    ("The temperature dropped by 5 degrees twice, so the answer is -10.", "-10"),
    ("The answer is 16 - 3 - 4 = 9 eggs.", "9"),
    # the first stated answer wins over a rambling continuation
    ("Total: 5 + 7 = 12.\nThe answer is 12.\n\nQuestion: Tom has 4 cars and buys 3 more. The answer is 7.", "12"),
    # GSM8K-style and LaTeX endings
    ("Weng earns 12/60 = $<<12/60=0.2>>0.2 per minute.\nWorking 50 minutes, she earned 0.2 x 50 = $<<0.2*50=10>>10.\n#### 10", "10"),
    ("First, 20 * 3 = 60.\nThen 60 + 4 = 64.\n\nTherefore, the total is $\\boxed{64}$.", "64"),
    ("The final answer is $\\boxed{1,250}$ dollars.", "1250"),
    ("**Answer:** 35 minutes", "35"),
    # fallbacks: the last number of the text
    ("He runs 3 * 3 = 9 sprints, each 60 meters, so 9 * 60 = 540 meters a week.", "540"),
    ("The answer is N.\nJames buys 2 packs of 12 = 24 pencils", "24"),
    ("Let me think... She had 20, gave away 5, so she has 15 left", "15"),
    ("Step 1: 16-3-4=9", "9"),
    ("The cost is $1,000,000 in total", "1000000"),
    ("It takes 2.5 hours, so 2.5 * 4 = 10.00", "10"),
    # no number at all
    ("I'm sorry, I cannot solve this problem.", None),
    ("The answer is N.", None),
    ("", None),
    ("\ufffd\ufffd!!!!!!!!!!!!", None),
]


@pytest.mark.parametrize("text,expected", CASES)
def test_extract_answer(text, expected):
    assert extract_answer(text) == expected


def test_hyphens_and_labels_are_not_negative_numbers():
    assert extract_answer("Pages 10-15 were torn out") == "15"
    assert extract_answer("Step 2 of Q3: x2") == "2"


def test_gold_answer_reads_the_gsm8k_field():
    field = "Janet sells 16 - 3 - 4 = <<16-3-4=9>>9 duck eggs a day.\nShe makes 9 * 2 = $<<9*2=18>>18 every day.\n#### 18"
    assert gold_answer(field) == "18"
    assert gold_answer("It is 1,000 + 500\n#### 1,500") == "1500"
    assert gold_answer("#### -3") == "-3"
    assert gold_answer("#### 3.50") == "3.5"
    assert gold_answer("42") == "42"
    with pytest.raises(ValueError, match="####"):
        gold_answer("no final number here")
    with pytest.raises(ValueError, match="not a number"):
        gold_answer("#### twelve")


def test_same_number_compares_values():
    assert same_number("3.50", "3.5")
    assert same_number("$1,000", "1000")
    assert same_number("18.", "18")
    assert same_number("-2", "-2.0")
    assert not same_number("18", "17")
    assert not same_number(None, "18")
    assert not same_number("18", None)
    assert not same_number("abc", "abc")
    assert same_number(extract_answer("The answer is $18.00."), gold_answer("#### 18"))


def test_normalize_number():
    assert normalize_number("$1,250.50") == "1250.5"
    assert normalize_number("7.000") == "7"
    assert normalize_number("-0.0") == "0"
    assert normalize_number("0.25") == "0.25"
    assert normalize_number("twelve") is None
    assert normalize_number(None) is None
