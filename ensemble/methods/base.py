"""What every method shares: the run's response text, token records, stop rules, sampling and stats."""

from __future__ import annotations

import datetime as _dt
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

import torch

from ..errors import Cancelled, InputError
from ..members.base import Backend
from ..members.local import LOCAL
from ..members.runtime import RunPolicy
from ..settings import Settings
from ..tokens.distribution import Dist, ProbsDist, summary_size
from ..tokens.key_table import EOS_KEY, display_key
from ..trace import Decision, Details, DrafterDetails, FusionRecord, RoundRecord, RunTrace, TokenRecord
from .member import ModelAdapter

if TYPE_CHECKING:
    from .registry import Method


@dataclass
class TokenEvent:
    """A committed token, released to the stream: its ``record`` and the response ``text`` so far (what a viewer
    draws the record from: ``text[record.start:record.end]``; it covers every record streamed up to this one)."""

    record: TokenRecord
    text: str = ""
    provisional: ClassVar[bool] = False


@dataclass
class DraftEvent:
    """A token the drafter has just drafted and the verifiers have not checked yet (SAFE): **provisional**.

    It is never part of the trace nor of the answer: the round's verification decides it, and the round's
    :class:`TokenEvent` records (after its :class:`RoundEvent`) supersede every draft of that round, kept, replaced or
    discarded. A viewer may show drafts while they are checked (the app's strip, the CLI on a terminal); a stream of
    final text reads :class:`TokenEvent` only (every event class says so in ``provisional``).

    ``text`` is the response so far followed by the draft up to this token; ``text[start:end]`` is what this token
    adds to it ("" for a byte token inside an unfinished character, a control token or the end of sequence, whose
    ``key`` is ``<eos>``). ``index`` is its place in the round's draft. ``text[:start]`` may hold committed text that
    no event has released yet (records wait while a stop string could still cut them).
    """

    round: int
    index: int
    model: str
    key: str
    start: int
    end: int
    text: str
    provisional: ClassVar[bool] = True


@dataclass
class RoundEvent:
    record: RoundRecord
    provisional: ClassVar[bool] = False


@dataclass
class StatusEvent:
    """Progress inside a step that commits nothing yet (SpecEM's drafts before the round's vote).

    ``message`` holds model output: escape it wherever it is rendered. ``data`` is the same as fields.
    """

    message: str
    data: dict = field(default_factory=dict)
    provisional: ClassVar[bool] = False


CHAR_EXTRA = 3
"""Tokens a run may add beyond its budget to finish a character (a UTF-8 character has at most 4 bytes)."""


class Chooser:
    """Greedy argmax, or temperature / top-p sampling with a seeded generator."""

    def __init__(self, temperature: float = 0.0, top_p: float = 1.0, seed: int = 0):
        self.temperature, self.top_p = temperature, top_p
        self.generator = torch.Generator().manual_seed(seed)

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0

    def probs(self, logits: torch.Tensor) -> torch.Tensor:
        """The distribution this chooser samples from (tempered, nucleus-filtered)."""
        if self.greedy:
            return torch.softmax(logits.float(), dim=-1)
        probs = torch.softmax(logits.float() / self.temperature, dim=-1)
        if self.top_p < 1.0:
            sorted_p, order = torch.sort(probs, descending=True)
            keep = sorted_p.cumsum(0) - sorted_p < self.top_p
            filtered = torch.zeros_like(probs)
            filtered[order[keep]] = sorted_p[keep]
            probs = filtered / filtered.sum()
        return probs

    def dist(self, dist: Dist) -> Dist:
        """The distribution this chooser draws from, read like any other (greedy: the model's own)."""
        return dist if self.greedy else ProbsDist(self.probs(dist.full()), dist.size)

    def __call__(self, dist: Dist) -> int:
        if self.greedy:
            return dist.argmax()
        return int(torch.multinomial(self.probs(dist.full()), 1, generator=self.generator))

    def sample(self, probs: torch.Tensor) -> int:
        return int(torch.multinomial(probs, 1, generator=self.generator))

    def uniform(self) -> float:
        return float(torch.rand(1, generator=self.generator))


def whole_rows_refusal(reads_whole_rows: bool, adapters) -> str | None:
    """Why a run cannot start (one sentence), or None: it reads whole rows (it samples, or GaC sharpens
    geometrically) and a member gives only its top k (a member on a server)."""
    if not reads_whole_rows:
        return None
    for adapter in adapters:
        if not adapter.runtime.whole_rows:
            k = adapter.loaded.info.get("top_k", "k")
            return (
                f"{adapter.name} runs on a server that gives only its top {k} log-probabilities, and this run reads "
                "whole rows (a temperature above 0, sampled drafts or GaC's geometric sharpening): use temperature 0 "
                "and another sharpening with server members."
            )
    return None


class Run:
    """State of one run: the shared response text, its token records and the trace being built.

    Records are released to the stream only when the text they cover can no longer be cut by a stop string,
    so streamed output is append-only.
    """

    def __init__(
        self,
        kind: type[Method],
        adapters: list[ModelAdapter],
        prompt: str,
        settings: Settings,
        cancel: threading.Event | None = None,
        backend: Backend | None = None,
        fork: dict | None = None,
        kept: str = "",
        force: str = "",
        warnings: list[str] | None = None,
    ):
        method = kind.capabilities.name
        self.kind, self.method = kind, method
        self.adapters = adapters
        self.backend = backend or LOCAL  # runs per-member work at the same time when members are processes
        self.settings = settings
        self.cancel = cancel or threading.Event()
        self.started = time.perf_counter()
        self.prompt = prompt  # cleaned by EnsembleRun (ensemble.preflight.check_run); ``warnings`` are what it found
        effective = settings.to_dict()
        effective["sharpen"] = settings.sharpen_for(method)
        if kind.capabilities.fusion:
            effective["fusion"] = kind.capabilities.fusion  # the every-token methods are their own fusion
        self.trace = RunTrace(
            method=method,
            models=[a.name for a in adapters],
            settings=effective,
            prompt=self.prompt,
            warnings=list(warnings or []),
            created=_dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
            model_info={a.name: {"source": a.loaded.source, **a.loaded.info} for a in adapters},
            drafter=(settings.drafter or adapters[0].name) if kind.capabilities.has_drafter else None,
            fork=fork,
        )
        self.stop_strings = (
            list(settings.stop_strings)
            if settings.stop_strings is not None
            else sorted({s for a in adapters for s in a.loaded.template.stop_strings})
        )
        self._released = 0
        self._outside_seen: dict[str, int] = {}  # each member's reads outside its top k so far (servers)
        self._held: list[TokenRecord] = []
        self._partial: list[tuple] = []
        self.stopped: str | None = None
        self.fusion_ms: list[float] = []
        self._trim_prompt()
        refusal = whole_rows_refusal(kind.reads_whole_rows(settings), adapters)
        if refusal:
            raise InputError(refusal)
        lead = None if self.trace.drafter is None else self.lead
        threads = self.backend.member_threads(kind.capabilities.leads_draft, adapters, lead)
        for adapter, count in zip(adapters, threads, strict=True):
            adapter.reset_stats()
            adapter.configure(RunPolicy(
                cancel=self.cancel,
                summary_size=summary_size(settings.top_k),
                full_rows=kind.reads_whole_rows(settings),
                rows_kept=kind.rows_kept(settings, adapter is lead),
                threads=count,
            ))
            adapter.start(self.prompt)
            if kept or force:  # a fork (ensemble.fork): the response so far is the run's kept text, tokenized afresh
                adapter.sync(kept + force)  # a forced key is committed as text, every model re-syncs (as after a fused key)
        self.text = kept
        self._base = len(kept)  # the response's start (a fork's kept text is not the run's)
        if force:
            self.add(force, force, "ensemble", Decision.DRAFTER, details=DrafterDetails(forced=True))

    @property
    def lead(self) -> ModelAdapter:
        """The model whose tokens the others check: SAFE's drafter, every-token's primary, the single model."""
        return next(a for a in self.adapters if a.name == self.trace.drafter)

    # -- prompt -----------------------------------------------------------------------------------------
    def _trim_prompt(self) -> None:
        """Trim a prompt too long for the budget or a model's context, keeping its end, with a warning."""
        budget = self.settings.max_new_tokens
        limits = [min(self.settings.max_prompt_tokens, a.loaded.context_limit - budget - 8) for a in self.adapters]
        if min(limits) < 16:
            raise InputError(
                f"max_new_tokens ({budget}) leaves no room for the prompt in the smallest model context "
                f"({min(a.loaded.context_limit for a in self.adapters)} tokens)."
            )
        prompt = self.prompt
        for _ in range(12):
            over = max(len(a.keys.encode(prompt)) / limit for a, limit in zip(self.adapters, limits, strict=True))
            if over <= 1.0:
                break
            keep = int(len(prompt) / over * 0.97)
            prompt = prompt[len(prompt) - keep :]
        if prompt != self.prompt:
            self.trace.warnings.append(
                f"The prompt was {len(self.prompt):,} characters, more than the models' context allows with "
                f"{budget} new tokens; only its last {len(prompt):,} characters were used."
            )
            self.prompt = prompt
            self.trace.prompt = prompt

    # -- records ----------------------------------------------------------------------------------------
    @property
    def generated(self) -> int:
        return len(self.trace.tokens) + len(self._partial)

    @property
    def budget_left(self) -> int:
        """Tokens the run may still add. At the budget, a character begun by byte tokens may take up to
        :data:`CHAR_EXTRA` more so the response never ends inside it (what they add is noted in the trace)."""
        left = self.settings.max_new_tokens - self.generated
        if left <= 0 and self._partial and self.generated < self.settings.max_new_tokens + CHAR_EXTRA:
            return 1
        return left

    def check_cancel(self) -> None:
        if self.cancel.is_set():
            raise Cancelled("Stopped by the user.")

    def add(
        self,
        piece: str,
        key: str,
        model: str,
        decision: Decision,
        *,
        span: tuple[int, int] | None = None,
        condition: str | None = None,
        round_index: int | None = None,
        details: Details | None = None,
        fusion: FusionRecord | None = None,
        topk: list | None = None,
    ) -> TokenRecord:
        """Record one accepted token; ``piece`` is the text it adds to the response (may be "" for a byte
        token whose character is not finished; ``span`` then gives the character it belongs to). Once Stop was
        pressed nothing is recorded: a pass that finishes after the click is discarded (:class:`Cancelled`)."""
        self.check_cancel()
        return self._record(piece, key, model, decision, span=span, condition=condition, round_index=round_index,
                            details=details, fusion=fusion, topk=topk)

    def _record(self, piece: str, key: str, model: str, decision: Decision, *, span=None, condition=None,
                round_index=None, details=None, fusion=None, topk=None) -> TokenRecord:
        start = len(self.text)
        self.text += piece
        if span is None:
            span = (start, len(self.text))
        record = TokenRecord(
            index=len(self.trace.tokens),
            text=display_key(key) if key != EOS_KEY else "<eos>",
            start=span[0],
            end=span[1],
            model=model,
            decision=decision,
            condition=condition,
            round=round_index,
            details=details,
            fusion=fusion,
            topk=topk,
        )
        self._mark_outside(record)
        if fusion is not None:
            self.fusion_ms.append(fusion.ms)
        if self.trace.stats.first_token_s is None:
            self.trace.stats.first_token_s = round(time.perf_counter() - self.started, 4)
        self.trace.tokens.append(record)
        self._held.append(record)
        return record

    def _mark_outside(self, record: TokenRecord) -> None:
        """Name in the record the members whose probabilities read since the last record include ids outside their
        top k (members on servers; the inspector says "outside smollm2's top 20")."""
        outside = {}
        for adapter in self.adapters:
            count = adapter.runtime.outside_reads()
            if count > self._outside_seen.get(adapter.name, 0):
                outside[adapter.name] = int(adapter.loaded.info.get("top_k", 0))
                self._outside_seen[adapter.name] = count
        if outside:
            record.details.outside_top_k = outside

    def add_model_tokens(self, adapter: ModelAdapter, first: int, decision: Decision, upto: int | None = None, **kwargs) -> None:
        """Record the adapter's response tokens from index ``first`` on (the adapter spells the response).

        Byte tokens that split one character are held until the character is complete; then every one of
        them is recorded with that character's span, so a character is never split in the trace. Stop is checked
        once, before the first: a commit is whole or, after the click, nothing.
        """
        self.check_cancel()
        for i in range(first, len(adapter.ids) if upto is None else upto):
            key = adapter.keys.key(adapter.ids[i])
            end = adapter.token_end(i)
            if end is None:
                self._partial.append((key, adapter.name, decision, kwargs))
                continue
            start = len(self.text)
            for held_key, model, held_decision, held_kwargs in self._partial:
                self._record("", held_key, model, held_decision, span=(start, end), **held_kwargs)
            self._partial = []
            self._record(adapter.text[start:end], key, adapter.name, decision, span=(start, end), **kwargs)

    def check_stop(self) -> bool:
        """Cut the response at a stop string if one appeared; True when the run must end."""
        for stop in self.stop_strings:
            idx = self.text.find(stop)
            if idx >= 0:
                self.text = self.text[:idx]
                self.trace.tokens = [t for t in self.trace.tokens if t.start < idx]
                self._held = [t for t in self._held if t.start < idx]
                for t in self.trace.tokens:
                    t.end = min(t.end, idx)
                self.stopped = "stop_string"
                return True
        return False

    def release(self) -> list[TokenEvent]:
        """Records that no stop string can cut any more, ready to stream."""
        safe = len(self.text) - self._stop_prefix_len()
        out = []
        while self._held and self._held[0].end <= safe:
            out.append(TokenEvent(self._held.pop(0), self.text))
        return out

    def withdraw(self, count: int) -> None:
        """Keep only the first ``count`` records (what was shown when Stop was pressed): the text ends where the
        last kept one ends, and the rounds that began after it go too. Records not released yet are dropped."""
        count = max(0, count)
        if count < len(self.trace.tokens):
            kept = self.trace.tokens[:count]
            while kept and kept[-1].start < kept[-1].end and len(kept) < len(self.trace.tokens) and \
                    (self.trace.tokens[len(kept)].start, self.trace.tokens[len(kept)].end) == (kept[-1].start, kept[-1].end):
                kept.append(self.trace.tokens[len(kept)])  # the other byte tokens of a character shown whole
            end = max([self._base, *(t.end for t in kept)])
            self.trace.tokens, self.text = kept, self.text[:end]
            self.trace.rounds = [r for r in self.trace.rounds if r.start < end or not r.accepted_text]
        self._held = [r for r in self._held if r.index < len(self.trace.tokens)]

    def released(self) -> int:
        """How many records were released to the stream (the rest wait for a stop string to be ruled out)."""
        return len(self.trace.tokens) - len(self._held)

    def release_all(self) -> list[TokenEvent]:
        out = [TokenEvent(r, self.text) for r in self._held]
        self._held = []
        return out

    def _stop_prefix_len(self) -> int:
        """Length of the longest end of the text that could still grow into a stop string."""
        best = 0
        for stop in self.stop_strings:
            for n in range(min(len(stop) - 1, len(self.text)), 0, -1):
                if self.text.endswith(stop[:n]):
                    best = max(best, n)
                    break
        return best

    def add_round(self, record: RoundRecord) -> RoundEvent:
        self.trace.rounds.append(record)
        return RoundEvent(record)

    # -- finishing --------------------------------------------------------------------------------------
    def finish(self, reason: str, error: str | None = None) -> RunTrace:
        budget = self.settings.max_new_tokens
        if self._partial:  # the run ended inside a character (Stop, an error, the extra tokens ran out): trim it
            self.trace.warnings.append(
                f"The response ended inside a character; its {len(self._partial)} unfinished byte token(s) were left out."
            )
            self._partial = []
        elif len(self.trace.tokens) > budget and reason == "budget":
            self.trace.warnings.append(
                f"The token budget ({budget}) ended inside a character; {len(self.trace.tokens) - budget} more byte "
                "token(s) finished it."
            )
        for adapter in self.adapters:
            outside = adapter.runtime.outside_reads()
            if outside:
                k = adapter.loaded.info.get("top_k", "k")
                self.trace.warnings.append(
                    f"{adapter.name} gives only its top {k} log-probabilities: {outside} probabilit"
                    f"{'y' if outside == 1 else 'ies'} this run read outside {adapter.name}'s top {k} were approximated "
                    "(the mass its top k leave, spread evenly over the rest of its vocabulary)."
                )
            retokenized = getattr(adapter.runtime, "retokenized", 0)
            if retokenized:
                self.trace.warnings.append(
                    f"{adapter.name}'s server takes text prompts and read {retokenized} of this run's contexts as other "
                    f"tokens than {adapter.name}'s own (a text whose tokens are not its usual split, such as two "
                    "newlines before a digit): its rows there are the server's reading of that text."
                )
        stats = self.trace.stats
        self.trace.text = self.text
        stats.latency_s = round(time.perf_counter() - self.started, 4)
        stats.generated_tokens = len(self.trace.tokens)
        counts: dict[str, int] = {}
        for t in self.trace.tokens:
            counts[str(t.decision)] = counts.get(str(t.decision), 0) + 1
        stats.decisions = counts
        stats.ensemble_steps = sum(1 for t in self.trace.tokens if t.fusion is not None)
        stats.et_ratio = round(stats.ensemble_steps / stats.generated_tokens, 4) if stats.generated_tokens else 0.0
        stats.rounds = len(self.trace.rounds)
        stats.tokens_per_s = round(stats.generated_tokens / stats.latency_s, 3) if stats.latency_s > 0 else 0.0
        stats.forward_passes = {a.name: a.stats.passes for a in self.adapters}
        stats.forward_tokens = {a.name: a.stats.tokens for a in self.adapters}
        stats.forward_s = {a.name: round(a.stats.seconds, 4) for a in self.adapters}
        stats.member_bytes = {a.name: a.stats.bytes for a in self.adapters if a.stats.bytes}
        stats.member_row_bytes = {a.name: a.stats.row_bytes for a in self.adapters if a.stats.row_bytes}
        stats.fusion_ms_mean = round(sum(self.fusion_ms) / len(self.fusion_ms), 3) if self.fusion_ms else 0.0
        stats.stop_reason = self.stopped or reason
        self.trace.error = error
        return self.trace


def model_topk(adapter: ModelAdapter, dist: Dist, k: int = 5) -> list[list]:
    """A model's top-k keys and probabilities."""
    return [[display_key(adapter.keys.key(i)), round(float(p), 6)] for i, p in dist.top(k)]
