"""A model's next-token distribution at one position, as the methods read it, and what of it leaves a member.

Every decision reads a few numbers of a distribution: its argmax, its top keys, the probability of a handful of
tokens (a draft token, a verifier's own token, the ids of the candidate keys of a fusion), never all 150k-262k
entries. :class:`Dist` is that reading. In process it wraps the whole logit row (:class:`FullDist`); from a member
process (:mod:`ensemble.members.ray.backend`) it holds the row's :class:`Summary` (argmax and the top ``size`` ids
with their logit and probability, about a kilobyte) and asks the member for any other id's numbers, which the
member computes from the row it kept (:class:`SizedDist`). Both compute every number with the same code
(:class:`RowMath`) on the same row, so a run reads the same bits from either, and its output is the same token for
token on any backend.

A sampled run (temperature above 0) reads whole rows (tempered softmax, nucleus filtering, drawing), so its
members send whole rows (``RowMode.full``); greedy runs, the default, never do.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

SUMMARY = 64
"""Ids in a row's summary by default: more than UniTE's default candidate scan (4k + 8 = 48 ids for k = 10)."""


def summary_size(top_k: int) -> int:
    """Ids a summary holds for a run with UniTE's ``top_k``: its candidate scan (``4k + 8`` ids) fits in it."""
    return max(SUMMARY, 4 * int(top_k) + 8)


@dataclass
class Summary:
    """What a member sends of one row: its argmax and its ``size`` most probable ids, each with its logit,
    probability and log-probability (descending by probability; ``torch.topk`` over the softmax, in the same order on
    every backend)."""

    argmax: int
    ids: np.ndarray  # int64
    values: np.ndarray  # float32 [3, size]: logits, probabilities, log-probabilities
    vocab: int

    @property
    def probs(self) -> np.ndarray:
        return self.values[1]

    @property
    def covers_vocab(self) -> bool:
        return len(self.ids) >= self.vocab

    @property
    def nbytes(self) -> int:
        return int(self.ids.nbytes + self.values.nbytes) + 16


class RowMath:
    """A float32 logit row (on the CPU: a GPU's row is copied once, a few hundred kB) and the whole-row quantities
    computed from it when asked (softmax, log-softmax; :meth:`forget` drops them, recomputed the same when asked
    again)."""

    def __init__(self, row: torch.Tensor):
        self.row = row.detach().float().cpu()
        self._probs: torch.Tensor | None = None
        self._logp: torch.Tensor | None = None

    def forget(self) -> None:
        self._probs = self._logp = None

    @property
    def probs(self) -> torch.Tensor:
        if self._probs is None:
            self._probs = torch.softmax(self.row, dim=-1)
        return self._probs

    @property
    def logprobs(self) -> torch.Tensor:
        if self._logp is None:
            self._logp = torch.log_softmax(self.row, dim=-1)
        return self._logp

    def values(self, ids: Sequence[int]) -> np.ndarray:
        """``[3, len(ids)]`` float32: the logit, probability and log-probability of each id."""
        index = torch.as_tensor(list(ids), dtype=torch.long)
        return torch.stack([self.row[index], self.probs[index], self.logprobs[index]]).numpy()

    def summary(self, size: int) -> Summary:
        """The row's summary (the same function in process and in a member)."""
        top_i = torch.topk(self.probs, min(int(size), self.row.shape[-1])).indices
        return Summary(int(torch.argmax(self.row)), top_i.numpy().astype(np.int64), self.values(top_i.tolist()), int(self.row.shape[-1]))


class Dist:
    """One next-token distribution as the methods read it (see the module docstring). Values come back as float32
    tensors in the order of the ids asked for."""

    size: int = SUMMARY

    @property
    def summary(self) -> Summary:
        raise NotImplementedError

    def _values(self, ids: list[int]) -> np.ndarray:
        raise NotImplementedError

    def full(self) -> torch.Tensor:
        """The whole logit row (a member sends it: only sampled runs and the rare fallbacks ask)."""
        raise NotImplementedError

    # -- reading -------------------------------------------------------------------------------------------
    def argmax(self) -> int:
        """The greedy choice: ``torch.argmax`` of the logits."""
        return self.summary.argmax

    @property
    def top_prob(self) -> float:
        """The largest probability."""
        return float(self.summary.probs[0])

    @property
    def tail(self) -> float:
        """An upper bound of the probability of any id outside the summary (0 when it holds the vocabulary)."""
        s = self.summary
        return 0.0 if s.covers_vocab else float(s.probs[-1])

    def top(self, n: int) -> list[tuple[int, float]]:
        """The ``n`` most probable ids with their probabilities (``n`` at most the summary's size)."""
        s = self.summary
        return list(zip(s.ids[:n].tolist(), s.probs[:n].tolist(), strict=True))

    def logits(self, ids: Sequence[int]) -> torch.Tensor:
        return torch.from_numpy(np.array(self._values(list(ids))[0]))

    def probs(self, ids: Sequence[int]) -> torch.Tensor:
        return torch.from_numpy(np.array(self._values(list(ids))[1]))

    def logprobs(self, ids: Sequence[int]) -> torch.Tensor:
        return torch.from_numpy(np.array(self._values(list(ids))[2]))

    def prob(self, token_id: int) -> float:
        return float(self._values([token_id])[1, 0])


class FullDist(Dist):
    """A distribution whose whole row is in this process."""

    def __init__(self, row: torch.Tensor, size: int = SUMMARY):
        self.math = RowMath(row)
        self.size = size
        self._summary: Summary | None = None

    @property
    def summary(self) -> Summary:
        if self._summary is None:
            self._summary = self.math.summary(self.size)
        return self._summary

    def argmax(self) -> int:
        if self._summary is None:  # greedy decoding needs no softmax
            return int(torch.argmax(self.math.row))
        return self._summary.argmax

    def _values(self, ids: list[int]) -> np.ndarray:
        return self.math.values(ids)

    def full(self) -> torch.Tensor:
        return self.math.row


class ProbsDist(Dist):
    """A distribution given by its probabilities only (a sampled run's tempered, nucleus-filtered one): it reads
    like any other, without logits."""

    def __init__(self, probs: torch.Tensor, size: int = SUMMARY):
        self._p = probs.detach().float().cpu()
        probs = self._p
        self.size = size
        ids = torch.topk(probs, min(size, probs.shape[-1])).indices.tolist()
        self._summary = Summary(int(torch.argmax(probs)), np.array(ids, np.int64), self._values(ids), int(probs.shape[-1]))

    @property
    def summary(self) -> Summary:
        return self._summary

    def _values(self, ids: list[int]) -> np.ndarray:
        p = self._p[torch.as_tensor(ids, dtype=torch.long)].numpy()
        with np.errstate(divide="ignore"):  # a filtered-out token's log-probability is -inf
            return np.stack([np.full_like(p, np.nan), p, np.log(p)])

    def full(self) -> torch.Tensor:
        return torch.log(self._p)


class SizedDist(Dist):
    """A distribution computed in a member process: its summary here, any other id's numbers fetched from the
    row the member kept (``fetch(ids) -> [3, len(ids)]``; ``whole() -> row``)."""

    def __init__(self, summary: Summary, fetch: Callable[[list[int]], np.ndarray], whole: Callable[[], torch.Tensor], size: int):
        self._summary = summary
        self._fetch, self._whole = fetch, whole
        self.size = size
        self._known: dict[int, np.ndarray] = {int(i): summary.values[:, c] for c, i in enumerate(summary.ids.tolist())}
        self._row: FullDist | None = None

    @property
    def summary(self) -> Summary:
        return self._summary

    def _values(self, ids: list[int]) -> np.ndarray:
        if self._row is not None:
            return self._row._values(ids)
        missing = sorted({i for i in ids if i not in self._known})
        if missing:
            fetched = self._fetch(missing)
            for col, i in enumerate(missing):
                self._known[i] = fetched[:, col]
        return np.stack([self._known[i] for i in ids], axis=1) if ids else np.zeros((3, 0), np.float32)

    def full(self) -> torch.Tensor:
        if self._row is None:
            self._row = FullDist(self._whole(), self.size)
        return self._row.full()


class TopDist(Dist):
    """A distribution of which only the top ``k`` ids' log-probabilities are known: what a serving engine sends
    (:mod:`ensemble.members.server`).

    Within the top ``k`` every number is exact, logits included up to a constant (a row's log-probabilities are its
    logits shifted by their log-sum-exp, so differences of them, all a method reads, are the same). An id outside
    the top ``k`` is given the mass the top ``k`` leave, spread evenly over the rest of the vocabulary (at most the
    ``k``-th probability): a documented approximation, counted in :attr:`outside` (the run's trace says how often).
    """

    def __init__(self, ids: Sequence[int], logprobs: Sequence[float], vocab: int, size: int = SUMMARY):
        order = np.argsort(-np.asarray(logprobs, np.float64), kind="stable")
        top_ids = np.asarray(ids, np.int64)[order]
        logp = np.asarray(logprobs, np.float32)[order]
        probs = np.exp(logp.astype(np.float64)).astype(np.float32)
        self.size = size
        self._summary = Summary(int(top_ids[0]), top_ids, np.stack([logp, probs, logp]), int(vocab))
        rest = max(1.0 - float(probs.astype(np.float64).sum()), 0.0) / max(int(vocab) - len(top_ids), 1)
        self.rest = min(rest, float(probs[-1])) if len(probs) else rest
        self._known = {int(i): c for c, i in enumerate(top_ids.tolist())}
        self.outside: set[int] = set()

    @property
    def k(self) -> int:
        return len(self._summary.ids)

    @property
    def summary(self) -> Summary:
        return self._summary

    @property
    def tail(self) -> float:
        return float(self._summary.probs[-1])

    def _values(self, ids: list[int]) -> np.ndarray:
        out = np.empty((3, len(ids)), np.float32)
        log_rest = float(np.log(self.rest)) if self.rest > 0 else -1e4
        for col, i in enumerate(ids):
            found = self._known.get(int(i))
            if found is None:
                self.outside.add(int(i))
                out[:, col] = (log_rest, self.rest, log_rest)
            else:
                out[:, col] = self._summary.values[:, found]
        return out

    def full(self) -> torch.Tensor:
        """The whole row as far as it is known: the top ``k`` log-probabilities, the even remainder elsewhere."""
        s = self._summary
        row = torch.full((s.vocab,), float(np.log(self.rest)) if self.rest > 0 else -1e4, dtype=torch.float32)
        row[torch.from_numpy(s.ids)] = torch.from_numpy(s.values[2].copy())
        return row
