"""Token-level fusion of next-token distributions from models with different vocabularies (the rules, their paper
sections and where the code differs: ``docs/algorithms.md``, section 2).

Two plug-ins meet on keys (the exact text a token appends, see :mod:`ensemble.tokens.key_table`):

* **UniTE** (Yao et al., arXiv 2410.03777): union U of every model's top-k keys; each model's logit for a
  key is that of its token with exactly this key (the likeliest, when several ids share it), else of the
  first token of its encoding of the key, unless that token already stands for another key of U for this
  model (exact keys claim their tokens first, then fallbacks in union order): then the key gets no mass
  from the model, so one token's probability is never counted twice; softmax over U per model, then a
  weighted average. That is the reading we chose, ``missing="once"`` (the setting ``unite_missing``, the
  default): the fallback to the first token is UniTE's, and counting that token once keeps each model's
  softmax over U a distribution over distinct continuations, so no model votes twice for the same text.
  ``missing="prefix"`` is the SAFE authors' released code: the first token's logit whatever else it stands
  for, so a model without ".\\n" gives ".\\n" (and ".\\n\\n") the score of its own "." and its one probability
  is counted two or three times (docs/algorithms.md, "UniTE").
* **GaC** (Yu et al., arXiv 2406.12585): every token of every vocabulary is mapped once to its key in a
  union vocabulary (a 0/1 map per model, ids with one key summed); the fused distribution is the weighted
  sum of the full distributions in that space. GaC's gate (fuse only when the main model is unsure) is
  applied by the methods, which know who the main model is.

Sharpening (SAFE, Yun et al., arXiv 2510.15346, §3.3) runs only when the fused maximum is below 0.5:
``heuristic`` applies §3.3's formula P(t_j) <- P(t_j) + sum of P(t_i) over the other candidates t_i that
start with t_j, for "the drafter's tokens" t_j whose fused probability exceeds λ. Which keys count as the
drafter's tokens is the ``scope`` (the setting ``sharpen_scope``; docs/algorithms.md, "Sharpening"):

* ``guarded`` (the default): the guards of the authors' released code. Only keys among the drafter's own 10
  most probable keys absorb, and a whitespace-only key absorbs only whitespace-only keys ("\\n" takes "\\n\\n",
  a bare space never takes " trees"): a space that swallowed the words it precedes replaced drafted words with
  a bare space in a side-by-side run against an independent implementation (issue 30). On the project's 60
  GSM8K questions it scored as the literal reading did (within noise) with 16-20% fewer replaced drafts
  (docs/results.md, "The 60-question measurement").
* ``vocabulary``: the paper's words read literally: any key the drafter's vocabulary has, any extension.

Neither reading stops a whole word from absorbing a longer word it starts (" the" takes " these"), though the
paper's aim is sub-word pieces "representing the same word"; docs/algorithms.md counts how often that happens.

The sums use the unmodified values (no chaining) and the formula adds mass without taking it from the t_i (the
paper's wording; only the argmax is used, which an absorbed t_i can never win over its absorber). The result is
renormalised for display and sampling. ``geometric`` uses the weighted geometric instead of the arithmetic mean.
"""

from __future__ import annotations

import threading
import time
from bisect import bisect_left
from dataclasses import dataclass

import torch

from ..settings import SHARPEN_SCOPES, UNITE_MISSING
from ..tokens.distribution import Dist, FullDist, summary_size
from ..tokens.key_table import KeyTable, display_key
from ..trace import FusionRecord

SHARPEN_BELOW = 0.5
SHARPEN_TOP = 10
"""Guarded sharpening: only keys among the drafter's this many most probable keys absorb (the released code's k)."""


@dataclass
class Fused:
    """A fusion result: the chosen key, the fused distribution over candidate keys, and its record."""

    choice: str
    keys: list[str]  # candidate keys (UniTE: the union; GaC: its summaries' keys, or the whole union vocabulary)
    position: dict[str, int]  # key -> index in ``keys``
    probs: torch.Tensor  # fused probabilities over ``keys`` after sharpening (sums to 1 over UniTE's union and the
    # whole GaC union; GaC from summaries lists its candidates' exact mass, the rest lies on keys it leaves out)
    record: FusionRecord

    def prob_of(self, key: str) -> float:
        idx = self.position.get(key)
        return 0.0 if idx is None else float(self.probs[idx])


def _top_keys(table: KeyTable, dist: Dist, k: int) -> list[tuple[str, float]]:
    """The ``k`` most likely distinct keys of one model, with their summed probability (over its ``4k + 8`` most
    likely ids, which a row summary always holds: :func:`ensemble.tokens.distribution.summary_size`)."""
    out: dict[str, float] = {}
    for token_id, value in dist.top(4 * k + 8):
        key = table.key(token_id)
        out[key] = out.get(key, 0.0) + value
        if len(out) >= k:
            break
    return sorted(out.items(), key=lambda kv: -kv[1])[:k]


def _pairs(keys: list[str], probs: torch.Tensor, k: int) -> list[list]:
    """The ``k`` most probable keys, equal values in the keys' order (``torch.topk`` orders ties by the tensor's
    length, and GaC's candidates and its whole union are tensors of different lengths)."""
    values, idx = torch.topk(probs, min(k + 16, len(keys)))
    ranked = sorted(zip(values.tolist(), idx.tolist(), strict=True), key=lambda vi: (-vi[0], vi[1]))[:k]
    return [[display_key(keys[i]), round(v, 6)] for v, i in ranked]


def is_blank(key: str) -> bool:
    """A whitespace-only key (" ", "\\n", "\\n\\n"): it carries no word."""
    return not key.strip()


def absorbs(key: str, other: str, guarded: bool) -> bool:
    """Whether sharpening adds ``other``'s mass to ``key``'s: ``other`` extends ``key``, and (guarded) a
    whitespace-only ``key`` takes only whitespace-only keys, never one that carries a word."""
    return other != key and other.startswith(key) and (not guarded or not is_blank(key) or is_blank(other))


def heuristic_sharpen(keys: list[str], probs: torch.Tensor, drafter_keys, lam: float, guarded: bool = False) -> torch.Tensor:
    """SAFE's heuristic (§3.3): for each candidate key in ``drafter_keys`` (anything supporting ``in``: the
    drafter's top keys, or the keys its vocabulary has) with fused probability above ``lam``, add the fused mass
    of every other candidate key that it :func:`absorbs` (unmodified values, no chaining); renormalise."""
    out = probs.clone()
    for i in torch.nonzero(probs > lam).flatten().tolist():
        key = keys[i]
        if key not in drafter_keys:
            continue
        out[i] += sum(float(probs[j]) for j, other in enumerate(keys) if absorbs(key, other, guarded))
    return out / out.sum()


class _Vocab:
    """``key in _Vocab(table)``: whether the table has a token with exactly this key."""

    def __init__(self, table: KeyTable):
        self.table = table

    def __contains__(self, key: str) -> bool:
        return bool(self.table.ids_for_key(key))


class UnionVocab:
    """GaC's union vocabulary for a set of key tables, built once and shared by all runs.

    ``index[m]`` maps each id of model m to its union position, which makes the 0/1 projection one
    ``index_add_``. Keys are also kept in sorted order with a permutation so
    that "every key that starts with k" is one contiguous range for the heuristic sharpening.
    """

    def __init__(self, tables: list[KeyTable]):
        position: dict[str, int] = {}
        self.keys: list[str] = []
        for table in tables:
            for key in table.keys:
                if key not in position:
                    position[key] = len(self.keys)
                    self.keys.append(key)
        self.size = len(self.keys)
        self.position = position
        self.index = [torch.tensor([position[k] for k in table.keys], dtype=torch.long) for table in tables]
        order = sorted(range(self.size), key=self.keys.__getitem__)
        self.sorted_keys = [self.keys[i] for i in order]
        self.order = torch.tensor(order, dtype=torch.long)
        self._blank: list[int] | None = None

    def blank_extensions(self, key: str) -> torch.Tensor:
        """Union positions of the whitespace-only keys that start with ``key`` (itself included)."""
        if self._blank is None:
            self._blank = [i for i, k in enumerate(self.keys) if is_blank(k)]
        return torch.tensor([i for i in self._blank if self.keys[i].startswith(key)], dtype=torch.long)

    def project(self, m: int, probs: torch.Tensor) -> torch.Tensor:
        out = torch.zeros(self.size, dtype=probs.dtype)
        out.index_add_(0, self.index[m], probs)
        return out

    def prefix_range(self, key: str) -> tuple[int, int]:
        lo = bisect_left(self.sorted_keys, key)
        hi = bisect_left(self.sorted_keys, key + "\U0010ffff", lo)
        return lo, hi


_UNIONS: dict[tuple[int, ...], UnionVocab] = {}  # by the tables' fingerprints, never by id()
_UNIONS_LOCK = threading.Lock()


def union_vocab(tables: list[KeyTable]) -> UnionVocab:
    """The cached union vocabulary of these key tables (built on first use, about a second for 460k keys).

    The cache is keyed by the tables' content fingerprints: an ``id()`` is reused once its table is garbage
    collected, so a new table at the same address would get another vocabulary's union.
    """
    ident = tuple(t.fingerprint for t in tables)
    with _UNIONS_LOCK:
        found = _UNIONS.get(ident)
        if found is None:
            found = _UNIONS[ident] = UnionVocab(tables)
            if len(_UNIONS) > 8:
                _UNIONS.pop(next(iter(_UNIONS)))
        return found


PREFIX_IDS_FETCHED = 4096
"""Above this many ids whose key extends a sharpened key, a member's whole row is read instead (cheaper than
sending the ids; the same numbers)."""


_BLANK_IDS: dict[int, list[int]] = {}  # by the table's fingerprint: the ids of its whitespace-only keys


def _blank_ids(table: KeyTable) -> list[int]:
    found = _BLANK_IDS.get(table.fingerprint)
    if found is None:
        found = _BLANK_IDS[table.fingerprint] = [i for i, k in enumerate(table.keys) if is_blank(k)]
        if len(_BLANK_IDS) > 8:
            _BLANK_IDS.pop(next(iter(_BLANK_IDS)))
    return found


def _prefix_mass(table: KeyTable, dist: Dist, key: str, guarded: bool = False) -> float:
    """One model's probability of every token whose key starts with ``key`` (itself included); guarded, of a
    whitespace-only ``key`` only the whitespace-only ones (:func:`absorbs`)."""
    if guarded and is_blank(key):
        ids = [i for i in _blank_ids(table) if table.keys[i].startswith(key)]
    else:
        ids = table.ids_with_prefix(key)
    if len(ids) > PREFIX_IDS_FETCHED:
        dist.full()  # a member's whole row, once (a short key such as " " extends to tens of thousands of ids)
    return float(dist.probs(ids).double().sum())


class Fuser:
    """Fuses the next-token distributions of a fixed set of models.

    Args:
        names: model names, in the order distributions will be given.
        tables: their key tables.
        fusion: ``"unite"`` or ``"gac"``.
        top_k: UniTE's k (also the length of recorded top-k lists).
        sharpen: ``"none"``, ``"heuristic"`` or ``"geometric"``.
        lam: the heuristic's threshold λ.
        scope: which keys the heuristic lets absorb: ``"guarded"`` (the drafter's top 10, a whitespace-only key
            only whitespace) or ``"vocabulary"`` (any key of the drafter's vocabulary); the module's docstring.
        missing: UniTE, a union key a model has no token for: ``"once"`` (its first token's logit unless that
            token stands for another key of the union) or ``"prefix"`` (even so); the module's docstring.
        weights: model weights (normalised; equal when None).
        temperature: logits are divided by it before the softmax (sampling runs); 0 means 1.
        whole: GaC over the whole union from whole rows even where the summaries decide (a check of them).

    Greedy runs read only what a decision needs from each distribution (:mod:`ensemble.tokens.distribution`): UniTE the
    logits of its candidate keys; GaC the exact mass of every key that some model ranks among its summary's ids,
    which decides the fused top-k whenever the k-th of them outweighs the most any other key can have (the
    models' summary tails; otherwise, and for sampled runs and the geometric mean, whole rows over the union).
    """

    def __init__(
        self,
        names: list[str],
        tables: list[KeyTable],
        fusion: str = "unite",
        top_k: int = 10,
        sharpen: str = "none",
        lam: float = 0.1,
        weights: dict[str, float] | None = None,
        temperature: float = 0.0,
        whole: bool = False,
        scope: str = "guarded",
        missing: str = "once",
    ):
        if scope not in SHARPEN_SCOPES:
            raise ValueError(f"unknown sharpening scope {scope!r}: one of {', '.join(SHARPEN_SCOPES)}")
        if missing not in UNITE_MISSING:
            raise ValueError(f"unknown rule for a missing UniTE key {missing!r}: one of {', '.join(UNITE_MISSING)}")
        self.count_once = missing == "once"
        self.names, self.tables = names, tables
        self.fusion, self.top_k, self.sharpen, self.lam = fusion, top_k, sharpen, lam
        self.guarded = scope == "guarded"
        raw = [float((weights or {}).get(n, 1.0)) for n in names]
        total = sum(raw)
        self.weights = [w / total for w in raw]
        self.tempered = bool(temperature and temperature > 0)
        self.temperature = temperature if self.tempered else 1.0
        self.whole = whole or self.tempered or (fusion == "gac" and sharpen == "geometric")
        self.union = union_vocab(tables) if fusion == "gac" else None
        self._first_token: list[dict[str, int | None]] = [{} for _ in tables]

    def fuse(self, dists: list[Dist | torch.Tensor], drafter: int = 0, draft_key: str | None = None, boundary: int = 0) -> Fused:
        """Fuse one step. ``drafter`` is the index of the model whose keys the heuristic may sharpen."""
        started = time.perf_counter()
        dists = [d if isinstance(d, Dist) else FullDist(d, summary_size(self.top_k)) for d in dists]  # rows given in process
        if self.tempered:
            dists = [FullDist(d.full().float() / self.temperature, d.size) for d in dists]
        per_model_top = [_top_keys(t, d, self.top_k) for t, d in zip(self.tables, dists, strict=True)]
        if self.guarded:  # the drafter's own top keys (the released code's k, whatever UniTE's k is)
            drafter_vocab = {k for k, _ in _top_keys(self.tables[drafter], dists[drafter], SHARPEN_TOP)}
        else:
            drafter_vocab = _Vocab(self.tables[drafter])
        found = None
        if self.fusion == "gac" and not self.whole:
            found = self._gac_sized(dists, drafter_vocab)
        if found is None and self.fusion == "gac":
            found = self._gac_whole(dists, drafter_vocab)
        if found is None:
            found = self._unite(dists, per_model_top, drafter_vocab)
        keys, position, before, after = found
        final = after if after is not None else before
        choice = keys[int(torch.argmax(final))]
        record = FusionRecord(
            boundary=boundary,
            fusion=self.fusion,
            weights={n: round(w, 4) for n, w in zip(self.names, self.weights, strict=True)},
            per_model={
                n: [[display_key(k), round(v, 6)] for k, v in top]
                for n, top in zip(self.names, per_model_top, strict=True)
            },
            before=_pairs(keys, before, self.top_k),
            after=_pairs(keys, after, self.top_k) if after is not None else None,
            sharpen=self.sharpen,
            sharpened=after is not None,
            choice=display_key(choice),
            draft=display_key(draft_key) if draft_key is not None else None,
            ms=0.0,
        )
        record.ms = round((time.perf_counter() - started) * 1000, 3)
        return Fused(choice, keys, position, final, record)

    def _sharpens(self, before: torch.Tensor) -> bool:
        return self.sharpen != "none" and float(before.max()) < SHARPEN_BELOW

    # -- UniTE ------------------------------------------------------------------------------------------
    def _unite(self, dists, per_model_top, drafter_vocab):
        union: dict[str, None] = {}
        for top in per_model_top:
            for key, _ in top:
                union.setdefault(key, None)
        keys = list(union)
        mapped = []
        for m, (table, dist) in enumerate(zip(self.tables, dists, strict=True)):
            single: list[int] = []  # one id per key
            multi: list[tuple[int, list[int]]] = []
            missing: list[int] = []
            exact = [table.ids_for_key(key) for key in keys]
            claimed = {t for ids in exact for t in ids}  # tokens that already stand for a key of U
            for i, key in enumerate(keys):
                ids = exact[i]
                if not ids:
                    first = self._first(m, key)
                    if first is not None and (first not in claimed or not self.count_once):
                        ids = [first]
                        claimed.add(first)
                if not ids:
                    missing.append(i)
                    single.append(-1)
                    continue
                if len(ids) > 1:
                    multi.append((i, ids))
                single.append(ids[0])
            needed = sorted({t for t in single if t >= 0} | {t for _, ids in multi for t in ids})
            logit = dict(zip(needed, dist.logits(needed).tolist(), strict=True))
            row = torch.tensor([logit.get(t, 0.0) for t in single], dtype=torch.float32)
            for i, ids in multi:
                row[i] = max(logit[t] for t in ids)  # "the token whose key is exactly u": the most likely of them
            if missing:
                row[missing] = float("-inf")
            mapped.append(torch.softmax(row, dim=0))
        fused = sum(w * p for w, p in zip(self.weights, mapped, strict=True))
        before = fused / fused.sum()
        after = None
        if self._sharpens(before):
            after = self._geometric(mapped) if self.sharpen == "geometric" else heuristic_sharpen(keys, before, drafter_vocab, self.lam, self.guarded)
        return keys, {k: i for i, k in enumerate(keys)}, before, after

    def _first(self, m: int, key: str) -> int | None:
        cache = self._first_token[m]
        if key not in cache:
            cache[key] = self.tables[m].first_token_of(key)
        return cache[key]

    # -- GaC --------------------------------------------------------------------------------------------
    def _gac_sized(self, dists, drafter_vocab):
        """GaC over the keys of the models' summaries, each with its exact fused mass (every id of the key, in
        every model); None when a key outside them could still rank in the recorded top-k (or exceed λ)."""
        assert self.union is not None
        candidates: set[str] = set()
        for table, dist in zip(self.tables, dists, strict=True):
            candidates.update(table.key(token_id) for token_id, _ in dist.top(dist.size))
        keys = sorted(candidates, key=self.union.position.__getitem__)  # union order: ties break as over the union
        mapped = []
        for table, dist in zip(self.tables, dists, strict=True):
            per_key = [table.ids_for_key(k) for k in keys]
            needed = sorted({t for ids in per_key for t in ids})
            prob = dict(zip(needed, dist.probs(needed).tolist(), strict=True))
            at = [i for i, ids in enumerate(per_key) for _ in ids]
            row = torch.zeros(len(keys), dtype=torch.float32)
            row.index_add_(0, torch.tensor(at, dtype=torch.long), torch.tensor([prob[t] for ids in per_key for t in ids], dtype=torch.float32))
            mapped.append(row)
        before = sum(w * p for w, p in zip(self.weights, mapped, strict=True))
        # The most any other key can have: each of its ids is below its model's summary tail.
        # (a float32 sum of w·p may round a little above the bound: a relative margin keeps the test on the safe side)
        outside = sum(w * t.most_ids_per_key * d.tail for w, t, d in zip(self.weights, self.tables, dists, strict=True))
        outside = outside * (1 + 1e-5) + 1e-12
        if len(keys) < self.top_k:
            return None  # the recorded top-k would hold keys outside the summaries
        kth = float(torch.topk(before, self.top_k).values[-1])
        sharpening = self._sharpens(before)
        if kth <= outside or (sharpening and self.lam <= outside):
            return None
        after = None
        if sharpening:
            # §3.3 on the union: every key that starts with k, counted in each model's own vocabulary.
            after, added = before.clone(), 0.0
            for i in torch.nonzero(before > self.lam).flatten().tolist():
                if keys[i] not in drafter_vocab:
                    continue
                mass = sum(w * _prefix_mass(t, d, keys[i], self.guarded) for w, t, d in zip(self.weights, self.tables, dists, strict=True))
                after[i] += mass - float(before[i])
                added += mass - float(before[i])
            after = after / (1.0 + added)  # the whole union's mass was 1 before
        return keys, {k: i for i, k in enumerate(keys)}, before, after

    def _gac_whole(self, dists, drafter_vocab):
        """GaC over the whole union vocabulary, from whole rows."""
        assert self.union is not None
        mapped = [self.union.project(m, torch.softmax(d.full().float(), dim=-1)) for m, d in enumerate(dists)]
        before = sum(w * p for w, p in zip(self.weights, mapped, strict=True))  # sums to 1 (a float32 sum over the
        # union would be off by up to 1e-5: dividing by it moved every value that much)
        after = None
        if self._sharpens(before):
            after = self._geometric(mapped) if self.sharpen == "geometric" else self._heuristic_union(before, drafter_vocab)
        return self.union.keys, self.union.position, before, after

    # -- sharpening -------------------------------------------------------------------------------------
    def _geometric(self, mapped: list[torch.Tensor]) -> torch.Tensor:
        log_mix = sum(w * torch.log(p.clamp_min(1e-30)) for w, p in zip(self.weights, mapped, strict=True))
        present = torch.stack([p > 0 for p in mapped]).all(dim=0)
        if not bool(present.any()):
            present = torch.ones_like(present)
        log_mix = torch.where(present, log_mix, torch.full_like(log_mix, float("-inf")))
        return torch.softmax(log_mix, dim=0)

    def _heuristic_union(self, before: torch.Tensor, drafter_vocab) -> torch.Tensor:
        # At most 1/λ keys exceed λ; prefix ranges in the sorted union make "every key that starts with k" one slice.
        assert self.union is not None
        out, added = before.clone(), 0.0
        for i in torch.nonzero(before > self.lam).flatten().tolist():
            key = self.union.keys[i]
            if key not in drafter_vocab:
                continue
            if self.guarded and is_blank(key):
                extensions = self.union.blank_extensions(key)
            else:
                lo, hi = self.union.prefix_range(key)
                extensions = self.union.order[lo:hi]
            gain = float(before[extensions].double().sum()) - float(before[i])
            out[i] += gain
            added += gain
        return out / (1.0 + added)  # the union's mass was 1 before (a float32 sum over it is off by up to 1e-5)
