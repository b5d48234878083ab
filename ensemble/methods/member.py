"""One member of a run: its tokens of the shared response (:mod:`ensemble.tokens.response`, no torch) joined to its
runtime (:class:`ensemble.members.runtime.Runtime`).

Methods change the ids (append a generated token, truncate, restore or re-sync to a new response text); the
cache follows lazily: the next call that needs logits hands the model all ids, and the model reuses the longest
prefix it already holds and runs one forward pass over the rest.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import torch

from ..members.factory import new_runtime
from ..members.runtime import ForwardStats, RunPolicy, Runtime
from ..models import LoadedModel
from ..tokens.distribution import Dist
from ..tokens.key_table import EOS_KEY
from ..tokens.response import ResponseTokens

__all__ = ["ForwardStats", "ModelAdapter"]


class ModelAdapter(ResponseTokens):
    """A loaded model's view of one run.

    Args:
        loaded: the shared model (weights, tokenizer, key table, template).
        name: the name used in traces (defaults to the model's name; two copies of one model need two names).
        runtime: where the forward passes run (default: the model's own runtime in this process; a run on a
            process backend passes a session of the model's member process).
    """

    def __init__(self, loaded: LoadedModel, name: str | None = None, runtime: Runtime | None = None):
        super().__init__(loaded.keys, name or loaded.name)
        self.loaded = loaded
        self.model = loaded.model
        self.runtime = runtime if runtime is not None else new_runtime(loaded)

    def start(self, prompt: str) -> None:
        """Begin a run: template the prompt, forget any response. The cache is kept: it follows the ids it is asked
        about (the longest prefix it holds is reused), and a llama.cpp context handed on from the last run holds the
        cells of the prompt the runs share, which dropping it here used to throw away."""
        self.begin(self.loaded.prompt_ids(prompt))

    @property
    def stats(self) -> ForwardStats:
        return self.runtime.stats

    def reset_stats(self) -> None:
        self.runtime.stats = ForwardStats()

    @property
    def policy(self) -> RunPolicy:
        return self.runtime.policy

    def configure(self, policy: RunPolicy) -> None:
        """Take the run's policy for this member (:class:`~ensemble.members.runtime.RunPolicy`)."""
        self.runtime.configure(policy)

    def close(self) -> None:
        """The run is over: free the KV cache (in a member process too)."""
        self.runtime.close()

    def drop_cache(self) -> None:
        """Forget the KV cache (the no-cache baseline recomputes the whole context)."""
        self.runtime.drop()

    # -- distributions ----------------------------------------------------------------------------------
    def dists(self, ids: list[int], positions: Sequence[int]) -> list[Dist]:
        """The next-token distributions after ``positions`` of ``ids``: whole rows in process, summaries from a
        member process (:mod:`ensemble.tokens.distribution`)."""
        return self.runtime.dists(ids, positions)

    def next_dist(self) -> Dist:
        """The next-token distribution after the prompt and the current response ids."""
        ids = self.all_ids()
        return self.dists(ids, [len(ids) - 1])[-1]

    def next_logits(self) -> torch.Tensor:
        """The whole next-token logit row (tests and tools; the methods read :meth:`next_dist`)."""
        ids = self.all_ids()
        return self.runtime.rows(ids, [len(ids) - 1])[-1]

    def logits_with(self, extra: Sequence[int]) -> torch.Tensor:
        """Logits before each of ``extra`` and after the last: ``[len(extra) + 1, vocab]``, one pass."""
        ids = self.all_ids() + list(extra)
        return self.runtime.rows(ids, range(len(ids) - len(extra) - 1, len(ids)))

    def distributions_from(self, offset: int, wanted: set[int] | None = None) -> list[tuple[int, int | None, Dist]]:
        """For every boundary of this model's tokens at or after character ``offset`` (only those in ``wanted``
        when given): the boundary, the token this model has there (None at the end of the text) and its
        next-token distribution, all from one forward pass."""
        edges = [(b, i) for b, i in self.boundaries_from(offset).items() if wanted is None or b in wanted]
        if not edges:
            return []
        positions = [self.prompt_len + (len(self.ids) if i is None else i) - 1 for _, i in edges]
        rows = self.dists(self.all_ids(), positions)
        return [(b, None if i is None else self.ids[i], rows[r]) for r, (b, i) in enumerate(edges)]

    def draft(self, n: int, choose) -> list[tuple[int, Dist]]:
        """Generate up to ``n`` tokens from the current state; returns (token id, distribution it was chosen from).

        Stops early at an end-of-sequence token (which is returned but not appended). Drafting continues past
        ``n`` (at most 4 tokens) while the last token ends inside a character, so drafts end on whole text. A
        greedy draft from a member process is made there in one call (the same tokens and distributions).
        """
        return list(self.drafting(n, choose))

    def drafting(self, n: int, choose) -> Iterator[tuple[int, Dist]]:
        """:meth:`draft`, each token yielded as soon as it is appended (the end of sequence as it is chosen), so
        a caller can show it while the next one is computed."""
        count = 0
        if self.runtime.remote and getattr(choose, "greedy", False) and not self.policy.full_rows and n > 1:
            for token_id, dist in self.runtime.draft_greedy(self.all_ids(), n, set(self.keys.eos_ids)):
                count += 1
                if self.keys.key(token_id) == EOS_KEY:
                    yield token_id, dist
                    return
                self.append(token_id)
                yield token_id, dist
        while count < n or (not self.finished and count < n + 4):
            dist = self.next_dist()
            token_id = choose(dist)
            count += 1
            if self.keys.key(token_id) == EOS_KEY:
                yield token_id, dist
                return
            self.append(token_id)
            yield token_id, dist
