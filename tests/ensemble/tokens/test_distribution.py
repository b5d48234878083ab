"""A next-token distribution as the methods read it (``ensemble.tokens.distribution``): a row's summary, the numbers read from a whole
row, from a member's summary with the other ids fetched, and from probabilities alone.

test_fuzz.py checks that GaC decides alike from summaries and from whole rows; these check the readings themselves.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ensemble.tokens.distribution import SUMMARY, FullDist, ProbsDist, RowMath, SizedDist, summary_size

ROW = torch.tensor([1.0, 3.0, 2.0, -1.0, 0.5, 3.0])  # a tie at the top: ids 1 and 5


def remote(row: torch.Tensor, size: int, asked: list) -> SizedDist:
    """A distribution as a member process serves it, with every fetch and whole row it is asked for noted."""
    math = RowMath(row)

    def fetch(ids):
        asked.append(list(ids))
        return math.values(ids)

    def whole():
        asked.append("row")
        return row

    return SizedDist(math.summary(size), fetch, whole, size)


def test_a_summary_holds_the_argmax_and_the_most_probable_ids_with_their_numbers():
    summary = RowMath(ROW).summary(3)
    assert summary.argmax == 1 == int(torch.argmax(ROW))  # the first of a tie, as torch.argmax
    assert set(summary.ids.tolist()) == {1, 5, 2} and summary.ids[-1] == 2 and summary.ids.dtype == np.int64
    assert summary.values.dtype == np.float32 and summary.values.shape == (3, 3)
    probs, logp = torch.softmax(ROW, -1), torch.log_softmax(ROW, -1)
    for column, i in enumerate(summary.ids.tolist()):
        assert summary.values[:, column].tolist() == [ROW[i].item(), probs[i].item(), logp[i].item()]
    assert np.array_equal(summary.probs, summary.values[1]) and list(summary.probs) == sorted(summary.probs, reverse=True)
    assert summary.vocab == 6 and not summary.covers_vocab and RowMath(ROW).summary(99).covers_vocab
    assert summary.nbytes == summary.ids.nbytes + summary.values.nbytes + 16 == 3 * 8 + 9 * 4 + 16


def test_the_summary_fits_unites_candidate_scan():
    assert summary_size(10) == SUMMARY == 64 and summary_size(14) == 64  # 4k + 8 = 48 and 64 ids
    assert summary_size(20) == 88


def test_a_whole_row_reads_every_id_in_the_order_asked():
    dist = FullDist(ROW.to(torch.float16), size=2)  # a half-precision row is read in float32
    row = ROW.to(torch.float16).float()
    assert dist.argmax() == 1 and dist.full().dtype == torch.float32 and torch.equal(dist.full(), row)
    ids = [4, 0, 4, 3]
    assert torch.equal(dist.logits(ids), row[ids]) and torch.equal(dist.probs(ids), torch.softmax(row, -1)[ids])
    assert torch.equal(dist.logprobs(ids), torch.log_softmax(row, -1)[ids])
    assert dist.prob(3) == torch.softmax(row, -1)[3].item()
    top = dist.top(2)
    assert [i for i, _ in top] in ([1, 5], [5, 1]) and top[0][1] == top[1][1] == dist.top_prob
    assert dist.tail == top[1][1]  # an id outside a 2-id summary has at most the summary's last probability
    assert FullDist(ROW, size=6).tail == 0.0  # the summary holds the vocabulary: nothing outside it
    assert dist.logits([]).shape == (0,)


def test_a_members_distribution_reads_the_same_bits_and_fetches_each_other_id_once():
    generator = torch.Generator().manual_seed(3)
    row = torch.randn(500, generator=generator) * 4
    asked: list = []
    local, sized = FullDist(row, size=8), remote(row, 8, asked)
    assert sized.argmax() == local.argmax() and sized.top(8) == local.top(8) and sized.tail == local.tail
    inside = local.summary.ids[:3].tolist()
    assert torch.equal(sized.probs(inside), local.probs(inside)) and asked == []  # the summary answered
    outside = [499, 0, 499, 250]
    for read in ("logits", "probs", "logprobs"):
        assert torch.equal(getattr(sized, read)(outside + inside), getattr(local, read)(outside + inside))
    assert asked == [sorted(set(outside) - set(inside))]  # one fetch, each missing id once
    assert sized.prob(0) == local.prob(0) and len(asked) == 1
    assert sized.logits([]).shape == (0,)
    assert torch.equal(sized.full(), row) and asked[-1] == "row"
    assert torch.equal(sized.probs([7, 123]), local.probs([7, 123])) and asked.count("row") == 1 and len(asked) == 2


def test_a_distribution_of_probabilities_alone_reads_like_any_other():
    """A sampled run's tempered, nucleus-filtered distribution: no logits, and a filtered-out id is impossible."""
    probs = torch.tensor([0.0, 0.7, 0.0, 0.3])
    dist = ProbsDist(probs, size=3)
    assert dist.argmax() == 1 and dist.top(2) == [(1, pytest.approx(0.7)), (3, pytest.approx(0.3))]
    assert dist.top_prob == pytest.approx(0.7) and dist.tail == 0.0  # the third id of the summary has p = 0
    assert torch.isnan(dist.logits([1, 3])).all()
    assert dist.logprobs([0, 1]).tolist() == [float("-inf"), pytest.approx(np.log(0.7))]
    assert dist.prob(2) == 0.0 and torch.equal(dist.full(), torch.log(probs))
    assert int(torch.argmax(dist.full())) == dist.argmax()


def test_forgotten_whole_row_quantities_come_back_bit_for_bit():
    math = RowMath(ROW)
    first, logp = math.probs.clone(), math.logprobs.clone()
    math.forget()
    assert torch.equal(math.probs, first) and torch.equal(math.logprobs, logp)
    assert np.array_equal(math.values([2, 0]), RowMath(ROW).values([2, 0]))

