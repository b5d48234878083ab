"""Members on serving engines: a model computed by an OpenAI-compatible server (vLLM, SGLang, llama.cpp's server),
one member per server URL, named ``NAME=URL`` (``qwen=http://127.0.0.1:8001/v1``,
:func:`ensemble.models.catalogue.split_server`).

This process keeps the member's tokenizer (``NAME``: an embedded name, a hub id or a folder), so its key table,
template and every text-side decision are the same as in process; the server is asked only for log-probabilities,
through ``/v1/completions`` with ``logprobs: k``. What it answers is the top ``k`` of a row
(:class:`~ensemble.tokens.distribution.TopDist`): exact within the top ``k``, an even share of the remaining mass
outside it (counted, and named in the run's trace). Whole rows never leave a server, so a run that reads them
(sampling, GaC's geometric sharpening) is refused before it starts (:func:`ensemble.methods.base.whole_rows_refusal`).

How each question is asked (:class:`Endpoint`, found at connect, never from the engine's name):

- a greedy draft: one request, ``max_tokens: n`` at temperature 0, each token with its top ``k``;
- rows after given positions (SAFE's verification, UniTE's and GaC's steps, SpecEM's verify-in-line): where the
  server takes the prompt as token ids and answers ``prompt_logprobs`` (vLLM), one request gives every position's
  row; otherwise (llama.cpp's server: text prompts, and its ``echo`` computes a sorted whole row per prompt token in
  Python, 5.6-7.8 s for 92 tokens of smollm2) one request per wanted position, each reusing the server's cache of
  the shared prefix.

Token names: a server that answers ``token_id:N`` (vLLM's ``return_tokens_as_token_ids``) is read by id; one that
answers text (llama.cpp's server) is read through the local tokenizer's text of each id, and a text several ids share
(an unfinished UTF-8 byte) is left out of the row. At connect the server must tokenize a probe text as this process
does, or the member is refused.

Requests have a timeout (``ENSEMBLE_LENS_SERVER_TIMEOUT``, seconds); a server that does not answer, refuses (4xx) or
fails (5xx) ends the run with :class:`ServerError`, which names it, and the trace so far is kept.
"""

from __future__ import annotations

import json
import os
import re
import time
import urllib.error
import urllib.request
from collections import OrderedDict

import torch

from ..errors import EnsembleError, MemberDied, ModelLoadError
from ..models.runtimes import runtime_info
from ..tokens.distribution import TopDist
from .runtime import ForwardStats, Runtime

TIMEOUT_ENV = "ENSEMBLE_LENS_SERVER_TIMEOUT"
DEFAULT_TIMEOUT_S = 120.0
PROBE = "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May."
"""The text a server must tokenize as the local tokenizer does (GSM8K's first question: digits, spaces, words)."""
RUNTIME = runtime_info("server")
"""This module's registration (:data:`ensemble.models.runtimes.REGISTRY`): its capabilities."""
ID_TOKEN = re.compile(r"^token_id:(\d+)$")


class ServerError(MemberDied):
    """A member's server did not answer, refused or failed; the message names the server. A run ends as when a
    member process dies (:class:`~ensemble.errors.MemberDied`): the trace so far is kept, with this message."""

    def __init__(self, message: str):
        EnsembleError.__init__(self, message)


def timeout_s() -> float:
    value = os.environ.get(TIMEOUT_ENV, "")
    try:
        return max(0.1, float(value)) if value else DEFAULT_TIMEOUT_S
    except ValueError:
        return DEFAULT_TIMEOUT_S


class Endpoint:
    """One server: its URL, model id, what it accepts (found at connect) and the map from its token names to ids.

    Attributes:
        url: the OpenAI-compatible base URL (``.../v1``).
        model_id: the model the server serves (its ``/v1/models``).
        k: the top ``k`` it gives per row (the registration's, less where the server caps it).
        ids_prompt: it takes a prompt as token ids (else the ids go as text, which it must tokenize back to them).
        prompt_logprobs: it answers ``prompt_logprobs`` (every prompt position's top ``k`` in one request).
        context_limit: its context in tokens, where it says (vLLM's ``max_model_len``), else 2048.
    """

    size_bytes = 0  # no weights in this process

    def __init__(self, url: str, keys, name: str):
        self.url, self.keys, self.name = url.rstrip("/"), keys, name
        self.model_id = ""
        self.k = RUNTIME.top_k or 20
        self.ids_prompt = self.prompt_logprobs = False
        self.context_limit = 2048
        self.bos = 0  # tokens the server puts before a text prompt (its BOS), found at connect
        self._by_text: dict[str, int] | None = None

    # -- HTTP --------------------------------------------------------------------------------------------
    def request(self, path: str, body: dict | None = None) -> tuple[dict, int]:
        """``GET`` (no body) or ``POST`` a JSON body; returns the answer and the bytes sent and received."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout_s()) as answer:
                raw = answer.read()
        except urllib.error.HTTPError as exc:
            detail = _error_detail(exc)
            raise ServerError(f"The server of {self.name} ({self.url}) answered {exc.code}: {detail}") from None
        except (TimeoutError, urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            what = "did not answer in time" if isinstance(reason, TimeoutError) else f"could not be reached ({reason})"
            raise ServerError(f"The server of {self.name} ({self.url}) {what}.") from None
        try:
            return json.loads(raw), len(raw) + len(data or b"")
        except ValueError:
            raise ServerError(f"The server of {self.name} ({self.url}) answered something that is not JSON.") from None

    def complete(self, ids: list[int], **fields) -> tuple[dict, int]:
        """One ``/v1/completions`` request after ``ids`` (as ids, or as their text), greedy, with the top ``k``."""
        body = {"model": self.model_id, "prompt": ids if self.ids_prompt else self.text(ids), "temperature": 0.0,
                "logprobs": self.k, "max_tokens": 1, **fields}
        if self.ids_prompt:
            body["return_tokens_as_token_ids"] = True
        answer, size = self.request("/completions", body)
        choices = answer.get("choices") if isinstance(answer, dict) else None
        if not choices or not isinstance(choices[0], dict):
            raise ServerError(f"The server of {self.name} ({self.url}) answered without a completion.")
        return {**choices[0], "_usage": answer.get("usage") or {}}, size

    def text(self, ids: list[int]) -> str:
        return self.keys.backend.decode(ids, skip_special_tokens=False)

    # -- token names -------------------------------------------------------------------------------------
    def token_id(self, name: str) -> int | None:
        """The id a server's token name stands for; None for a text several ids share."""
        found = ID_TOKEN.match(name)
        if found:
            return int(found.group(1))
        if self._by_text is None:
            self._by_text = {}
            shared: set[str] = set()
            for i in range(self.keys.vocab_size):
                text = self.keys.text_bytes(i).decode("utf-8", errors="ignore")
                if text in self._by_text:
                    shared.add(text)
                self._by_text[text] = i
            for text in shared:
                del self._by_text[text]
        return self._by_text.get(name)

    def row(self, top: dict | None, by_id: bool = False, chosen: tuple[int, float] | None = None) -> TopDist:
        """A row's top ``k`` as a distribution: ``{name: logprob}`` (``logprobs``' ``top_logprobs``), or keyed by id
        (``by_id``: vLLM's ``prompt_logprobs``, ``{id: {"logprob": ...}}``)."""
        if not top:
            raise ServerError(f"The server of {self.name} ({self.url}) sent no log-probabilities for a position.")
        ids, logps = [], []
        for name, value in top.items():
            token = int(name) if by_id else self.token_id(str(name))
            logp = value.get("logprob") if isinstance(value, dict) else value
            if token is not None and logp is not None and token not in ids:
                ids.append(token)
                logps.append(float(logp))
        if chosen is not None and chosen[0] not in ids and chosen[1] is not None:  # a text several ids share
            ids.append(chosen[0])
            logps.append(float(chosen[1]))
        if not ids:
            raise ServerError(f"The server of {self.name} ({self.url}) sent log-probabilities of unknown tokens.")
        return TopDist(ids, logps, self.keys.vocab_size, size=self.k)

    # -- connect -----------------------------------------------------------------------------------------
    def connect(self) -> None:
        """Read the model id, find what the server accepts and its ``k``, and check it tokenizes as we do."""
        models, _ = self.request("/models")
        data = models.get("data") if isinstance(models, dict) else None
        if not data:
            raise ServerError(f"The server of {self.name} ({self.url}) serves no model.")
        self.model_id = str(data[0].get("id", ""))
        self.context_limit = int(data[0].get("max_model_len") or self.context_limit)
        probe = self.keys.backend.encode(PROBE, add_special_tokens=False).ids
        self.ids_prompt = True
        try:
            self._find_k(probe)
        except ServerError:  # a prompt of token ids refused: the ids go as text
            self.ids_prompt, self.k = False, RUNTIME.top_k or 20
            self._find_k(probe)
        if self.ids_prompt:
            try:
                choice, _ = self.complete(probe, prompt_logprobs=self.k)
                self.prompt_logprobs = isinstance(choice.get("prompt_logprobs"), list)
            except ServerError:
                self.prompt_logprobs = False
        self._check_tokenizer(probe)

    def _find_k(self, probe: list[int]) -> None:
        """The largest ``k`` the server gives (vLLM caps it with ``--max-logprobs``, 20 by default)."""
        for k in dict.fromkeys((self.k, 10, 5, 1)):
            self.k = k
            try:
                self.complete(probe)
                return
            except ServerError as exc:
                found = re.search(r"max(?:imum)? allowed:? (\d+)", str(exc))
                if found and 0 < int(found.group(1)) < k:
                    self.k = int(found.group(1))
                    self.complete(probe)
                    return
                last = exc
        raise last

    def _check_tokenizer(self, probe: list[int]) -> None:
        """The server's tokens of the probe text (its ``echo``) must be the local tokenizer's."""
        body = {"echo": True, "logprobs": 1, "max_tokens": 1}
        if self.ids_prompt:  # ask for the text's tokens, not ours
            answer, _ = self.request("/completions", {"model": self.model_id, "prompt": PROBE, "temperature": 0.0,
                                                      "return_tokens_as_token_ids": True, **body})
            choices = answer.get("choices") if isinstance(answer, dict) else None
            if not choices or not isinstance(choices[0], dict):
                raise ServerError(f"The server of {self.name} ({self.url}) answered without a completion.")
            choice = {**choices[0], "_usage": answer.get("usage") or {}}
        else:
            choice, _ = self.complete(probe, **body)
        names = (choice.get("logprobs") or {}).get("tokens") or []
        self.bos = max(0, int(choice["_usage"].get("prompt_tokens") or len(probe)) - len(probe))
        theirs = [self.token_id(n) if ID_TOKEN.match(n) else n for n in names]
        ours = [int(i) if names and ID_TOKEN.match(names[0]) else self.keys.text_bytes(i).decode("utf-8", errors="ignore") for i in probe]
        if theirs[: len(ours)] != ours:
            at = next((i for i, (a, b) in enumerate(zip(theirs, ours, strict=False)) if a != b), min(len(theirs), len(ours)))
            raise ModelLoadError(
                f"The server at {self.url} tokenizes text differently from {self.name}'s tokenizer (from token {at}: "
                f"{theirs[at:at + 3]!r} vs {ours[at:at + 3]!r}): give the name of the model it serves before '='."
            )


def _error_detail(exc: urllib.error.HTTPError) -> str:
    """An error answer's message, one line (OpenAI-style ``{"error": {"message": ...}}`` or the body's start)."""
    try:
        body = exc.read().decode("utf-8", errors="replace")
    except OSError:
        body = ""
    try:
        found = json.loads(body)
        found = found.get("error", found) if isinstance(found, dict) else found
        message = found.get("message") or found.get("detail") if isinstance(found, dict) else None
        body = str(message or body)
    except ValueError:
        pass
    return (" ".join(body.split()) or exc.reason or "no detail")[:200]


class ServerModel(Runtime):
    """One run's questions to a member's server (:class:`Endpoint`): no cache here, the server keeps its own.

    ``remote``: a greedy draft is one request (:meth:`draft_greedy`). ``gil_free``: a request waits on a socket,
    so members on servers are asked at the same time, each in its own thread."""

    gil_free = RUNTIME.thread_safe
    remote = RUNTIME.remote
    whole_rows = RUNTIME.whole_rows

    def __init__(self, endpoint: Endpoint):
        self.endpoint = endpoint
        self.device = torch.device("cpu")
        self.stats = ForwardStats()
        self._ids: list[int] = []
        self._rows: OrderedDict[tuple[int, ...], TopDist] = OrderedDict()  # the rows after recent prefixes
        self.dists_read: list[TopDist] = []  # every row this run read (the trace counts reads outside the top k)
        self.retokenized = 0  # requests whose text the server read as other ids than ours (text prompts only)

    @classmethod
    def for_loaded(cls, loaded) -> ServerModel:
        return cls(loaded.model)

    @property
    def cache_ids(self) -> list[int]:
        return self._ids

    def outside_reads(self) -> int:
        """How many probabilities this run read outside a row's top ``k`` (approximated)."""
        return sum(len(d.outside) for d in self.dists_read)

    # -- requests ----------------------------------------------------------------------------------------
    def _ask(self, ids: list[int], **fields) -> dict:
        self.check_cancel()
        if len(ids) + int(fields.get("max_tokens", 1)) > self.endpoint.context_limit:
            raise ServerError(f"{self.endpoint.name}: {len(ids)} tokens do not fit the server's context of {self.endpoint.context_limit}.")
        started = time.perf_counter()
        choice, size = self.endpoint.complete(ids, **fields)
        self.stats.seconds += time.perf_counter() - started
        self.stats.passes += 1
        self.stats.tokens += len(ids) - _shared(self._ids, ids) + int(fields.get("max_tokens", 1))
        self.stats.bytes += size
        self._ids = list(ids)
        read = (choice.get("_usage") or {}).get("prompt_tokens")
        if read is not None and not self.endpoint.ids_prompt and read - self.endpoint.bos != len(ids):
            self.retokenized += 1  # the text of these ids is another id sequence to the server
        return choice

    def _keep(self, prefix: list[int], dist: TopDist) -> TopDist:
        self._rows[tuple(prefix)] = dist
        self.dists_read.append(dist)
        self.stats.row_bytes += 4 * self.endpoint.keys.vocab_size
        while len(self._rows) > 64:
            self._rows.popitem(last=False)
        return dist

    def dists(self, ids, positions) -> list[TopDist]:
        """The top ``k`` after each of ``positions`` of ``ids``: one request for all (``prompt_logprobs``) or one
        per position not asked before."""
        ids, positions = list(ids), list(positions)
        missing = [p for p in positions if tuple(ids[: p + 1]) not in self._rows]
        if missing and self.endpoint.prompt_logprobs and len(missing) > 1:
            upto = max(missing) + 1
            choice = self._ask(ids[:upto], prompt_logprobs=self.endpoint.k)
            prompt = choice.get("prompt_logprobs") or []
            last = (choice.get("logprobs") or {}).get("top_logprobs") or [None]
            for p in missing:
                top = prompt[p + 1] if p + 1 < upto and p + 1 < len(prompt) else last[0]
                self._keep(ids[: p + 1], self.endpoint.row(top, by_id=top is not last[0]))
        else:
            for p in missing:
                choice = self._ask(ids[: p + 1])
                self._keep(ids[: p + 1], self.endpoint.row(((choice.get("logprobs") or {}).get("top_logprobs") or [None])[0]))
        self._ids = ids  # the ids last asked about, as a cache follows them (verify-in-line's context)
        return [self._rows[tuple(ids[: p + 1])] for p in positions]

    def rows(self, ids, positions) -> torch.Tensor:
        """Rows as far as the server gives them (:meth:`TopDist.full`: tools and tests; the methods read dists)."""
        return torch.stack([d.full() for d in self.dists(ids, positions)])

    def draft_greedy(self, ids: list[int], n: int, stop: set[int]) -> list[tuple[int, TopDist]]:
        """Up to ``n`` greedy tokens after ``ids`` in one request, each with its top ``k``; where the server stopped
        at an end of sequence, that token (its row asked once more), returned but not appended."""
        ids = list(ids)
        choice = self._ask(ids, max_tokens=n)
        logprobs = choice.get("logprobs") or {}
        tops = (logprobs.get("top_logprobs") or [])[:n]
        chosen = self._chosen(choice, logprobs, len(tops))
        out: list[tuple[int, TopDist]] = []
        for j, top in enumerate(tops):
            pick = None if chosen is None else (chosen[j], (logprobs.get("token_logprobs") or [None] * len(tops))[j])
            dist = self._keep(ids + [t for t, _ in out], self.endpoint.row(top, chosen=pick))
            token = dist.argmax() if chosen is None else chosen[j]
            out.append((token, dist))
            if token in stop:
                return out
        if len(out) < n and choice.get("finish_reason") == "stop":
            after = ids + [t for t, _ in out]
            dist = self.dists(after, [len(after) - 1])[0]
            out.append((dist.argmax(), dist))
        return out

    def _chosen(self, choice: dict, logprobs: dict, n: int) -> list[int] | None:
        """The ids the server drafted: named by id (``token_id:N``), or the local tokens of its text where they are
        as many (a token whose text several ids share, an unfinished UTF-8 byte, is named by no text); else None
        (each row's argmax)."""
        names = logprobs.get("tokens") or []
        found = [self.endpoint.token_id(str(name)) if ID_TOKEN.match(str(name)) else None for name in names[:n]]
        if len(found) == n and all(f is not None for f in found):
            return found
        local = self.endpoint.keys.backend.encode(str(choice.get("text") or ""), add_special_tokens=False).ids
        return local if len(local) == n else None

    def branch_scores(self, ctx: int, blocks: list[list[int]], targets: list[int]) -> torch.Tensor:
        """Verify-in-line from the server's rows after each block token (``[2, tokens]``: log-probability, and the
        log-probability again as the logit, which a server does not send: equal up to the row's constant)."""
        context, values, at = self._ids[:ctx], [], 0
        for block in blocks:
            seq = context + list(block)
            dists = self.dists(seq, range(ctx, ctx + len(block)))
            for dist in dists:
                values.append(float(dist.logprobs([targets[at]])[0]))
                at += 1
        self._ids = context
        logp = torch.tensor(values, dtype=torch.float32)
        return torch.stack([logp, logp])

    def crop(self, keep: int) -> None:
        del self._ids[keep:]

    def drop(self) -> None:
        self._ids = []

    def close(self) -> None:
        self._rows.clear()


def _shared(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def load_server(spec, base: str, device: str, dtype: str, progress, weights: bool, runtime: str):
    """A member on a server (``NAME=URL``): the local tokenizer of ``NAME``, and the server checked at connect."""
    from ..models.catalogue import SERVER_KIND, resolve
    from ..models.loading import LoadedModel, _template, _template_kind, load_tokenizer

    if spec.kind != SERVER_KIND:
        raise ModelLoadError(f"To run {spec.name!r} on a server, give it as NAME=URL (qwen=http://127.0.0.1:8001/v1).")
    started = time.perf_counter()
    local = resolve(spec.tokenizer)
    _, keys = load_tokenizer(spec.tokenizer, progress)
    progress(f"{spec.name}: connecting to {spec.location}", None)
    endpoint = Endpoint(spec.location, keys, spec.name)
    try:
        endpoint.connect()
    except ServerError as exc:
        raise ModelLoadError(str(exc)) from None
    kind = _template_kind(keys.tokenizer, local.template)
    loaded = LoadedModel(
        name=spec.name, spec=spec, model=endpoint, tokenizer=keys.tokenizer, keys=keys, template=_template(kind),
        device="cpu", load_seconds=0.0, source=f"server {spec.location}", context_limit=endpoint.context_limit,
        info={
            "architecture": f"{endpoint.model_id} on {spec.location}",
            "vocab": keys.vocab_size,
            "tokenizer": keys.scheme,
            "template": kind,
            "dtype": f"top {endpoint.k} log-probabilities",
            "runtime": runtime,
            "top_k": endpoint.k,
        },
        load_args=(base, device, dtype, runtime), has_weights=True, runtime=runtime,
    )
    loaded.load_seconds = time.perf_counter() - started
    progress(f"{spec.name}: server ready ({endpoint.model_id}, top {endpoint.k})", 1.0)
    return loaded
