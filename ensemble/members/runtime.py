"""The runtime interface: a member's forward passes and KV cache for one run, wherever they compute.

Three runtimes implement :class:`Runtime`: transformers in this process (:mod:`.transformers`), llama.cpp in this
process (:mod:`.llamacpp`) and a member process of the Ray backend (:mod:`.ray`). A runtime knows nothing about
text: it is asked for the logits after some positions of an id sequence (:meth:`Runtime.rows`) and keeps in its
cache the longest prefix shared with the ids it was last asked about. What it may do is declared as class
attributes (:attr:`Runtime.gil_free`, :attr:`Runtime.remote`), never probed; a registered runtime's come from its
registration (:data:`ensemble.models.runtimes.REGISTRY`).

A run hands each runtime its :class:`RunPolicy` once (:meth:`Runtime.configure`), and
:func:`ensemble.members.factory.new_runtime` is the one place a runtime is built.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from ..errors import Cancelled
from ..tokens.distribution import SUMMARY, Dist, FullDist

if TYPE_CHECKING:
    import torch


@dataclass
class ForwardStats:
    passes: int = 0
    tokens: int = 0
    seconds: float = 0.0
    bytes: int = 0  # sent to and received from a member process (0 in process)
    row_bytes: int = 0  # the whole float32 rows of the distributions a member answered about (what they would take)
    first_s: float | None = None  # the run's first pass: the prompt read (with whatever it read besides)
    first_tokens: int = 0

    def count(self, seconds: float, tokens: int) -> None:
        """One forward pass of ``tokens`` ids that took ``seconds``."""
        if self.passes == 0:
            self.first_s, self.first_tokens = seconds, tokens
        self.seconds += seconds
        self.passes += 1
        self.tokens += tokens


@dataclass(frozen=True)
class RunPolicy:
    """What one run asks of one member's runtime, handed over once when the run starts.

    Attributes:
        cancel: the run's Stop flag, checked before every forward pass (None: never stopped).
        summary_size: ids of a row summary a member process sends (from UniTE's k, :func:`ensemble.tokens.distribution.summary_size`).
        full_rows: whole rows from a member process (a sampled run, GaC's geometric mean read them).
        rows_kept: passes whose rows a member process keeps for later questions (SAFE's drafter: its round and the next).
        threads: threads of this member's passes (its role in the run); None: the runtime's own default.
    """

    cancel: threading.Event | None = None
    summary_size: int = SUMMARY
    full_rows: bool = False
    rows_kept: int = 16
    threads: int | None = None


class Runtime:
    """One run's forward passes of one model, with a KV cache that follows the ids it is asked about.

    Subclasses implement :meth:`rows`, :meth:`branch_scores`, :meth:`crop`, :meth:`drop` and :meth:`close`, and
    declare what they can do in the class attributes below.
    """

    gil_free: ClassVar[bool] = False
    """Its passes are C calls that release the GIL: members of one process can compute at the same time in threads."""
    remote: ClassVar[bool] = False
    """It computes in another process: distributions come as row summaries (:meth:`dists`), and a greedy draft is
    made there in one call (:meth:`draft_greedy`) instead of one round trip per token."""

    whole_rows: ClassVar[bool] = True
    """It gives a position's whole row, so any id's probability (False: its top ``k`` only, a server's)."""

    stats: ForwardStats
    policy: RunPolicy = RunPolicy()

    @classmethod
    def for_loaded(cls, loaded) -> Runtime:
        """A fresh runtime for one run of ``loaded`` (:func:`ensemble.members.factory.new_runtime` calls it)."""
        raise NotImplementedError

    @classmethod
    def warm(cls, loaded) -> int:
        """Get ``loaded`` ready before its first run (its first context, say); returns the ids read, 0 when there
        is nothing to do."""
        return 0

    @classmethod
    def forget_prompts(cls, loaded) -> None:
        """Forget what ``loaded`` keeps from ended runs beyond the template head, so that the next run reads its
        prompt as a new question's (``bench``'s whole answers; llama.cpp hands contexts from run to run)."""

    @property
    def cache_ids(self) -> list[int]:
        """The ids whose keys and values the cache holds, in order."""
        raise NotImplementedError

    def configure(self, policy: RunPolicy) -> None:
        """Take a run's policy (its Stop flag, what a member process sends and keeps, the threads of its role)."""
        self.policy = policy
        if policy.threads is not None:
            self.threads = policy.threads

    @property
    def threads(self) -> int | None:
        return self.policy.threads

    @threads.setter
    def threads(self, value: int | None) -> None:
        """Threads of the next passes (a runtime whose thread count is its own applies it here)."""

    def outside_reads(self) -> int:
        """How many probabilities this run read outside the rows it was given (approximated; 0: whole rows)."""
        return 0

    def check_cancel(self) -> None:
        cancel = self.policy.cancel
        if cancel is not None and cancel.is_set():
            raise Cancelled("Stopped by the user.")

    # -- forward passes ----------------------------------------------------------------------------------
    def rows(self, ids, positions) -> torch.Tensor:
        """Logits (float32) after each of ``positions`` (absolute, sorted) of ``ids``: one row per position.
        Only what the cache does not hold is computed; afterwards it holds all of ``ids``."""
        raise NotImplementedError

    def dists(self, ids, positions) -> list[Dist]:
        """The next-token distributions after ``positions`` of ``ids`` as the methods read them: whole rows in this
        process (:class:`~ensemble.tokens.distribution.FullDist`)."""
        return [FullDist(row, self.policy.summary_size) for row in self.rows(ids, positions)]

    def draft_greedy(self, ids: list[int], n: int, stop: set[int]) -> list[tuple[int, Dist]]:
        """Up to ``n`` greedy tokens after ``ids``, each with its distribution, in one call (``remote`` runtimes)."""
        raise NotImplementedError(f"{type(self).__name__} drafts through its adapter, one pass per token")

    def branch_scores(self, ctx: int, blocks: list[list[int]], targets: list[int]) -> torch.Tensor:
        """Verify-in-line (SpecEM §3.2): every block after the cached context of ``ctx`` ids in one pass; for each
        block token the log-probability and raw logit of its ``targets`` entry (``[2, tokens]``). The cache keeps
        the context."""
        raise NotImplementedError

    # -- the cache ---------------------------------------------------------------------------------------
    def crop(self, keep: int) -> None:
        """Keep only the first ``keep`` cached ids."""
        raise NotImplementedError

    def drop(self) -> None:
        """Forget the KV cache."""
        raise NotImplementedError

    def close(self) -> None:
        """The run is over: free the cache (or hand it on, llama.cpp; or free it in the member process)."""
        raise NotImplementedError
