"""Reliability: bad input, load, cancellation, faults, memory. Each test fails when the property breaks."""

from __future__ import annotations

import gc
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import psutil
import pytest
import torch
from gradio_client import Client

from ensemble import models
from ensemble.errors import Cancelled, ModelLoadError
from ensemble.files import file_sha256
from ensemble.methods import EnsembleRun, TokenEvent, generate
from ensemble.models import cache, integrity
from ensemble.settings import Settings
from ensemble.trace import RunTrace
from tests.conftest import ROOT

pytestmark = pytest.mark.embedded

ODD_PROMPTS = {
    "emoji": "Describe 👩‍💻🇧🇬🙂 in one short sentence.",
    "cjk": "用一句话介绍普罗夫迪夫。",
    "rtl": "ترجم إلى الإنجليزية: صباح الخير يا صديقي",
    "combining": "Spell cafe\u0301 and nai\u0308ve letter by letter.",
    "zero_width": "zero\u200bwidth\u200d and\ufeff joiners: what are they?",
    "control": "NUL\x00 and bell\x07 and escape\x1b[31m red \x7f: repeat the word red.",
    "lone_surrogate": "broken \ud800 half: say ok.",
}


@pytest.fixture(scope="module")
def client(app_url):
    return Client(app_url, verbose=False)


def _api(client, prompt, method="safe", models="smollm2,gemma3", **settings):
    return RunTrace.from_dict(
        client.predict(prompt=prompt, method=method, models=models, settings=settings, api_name="/run_ensemble")
    )


# -- 1. bad input -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", [k for k in ODD_PROMPTS if k != "lone_surrogate"])
def test_odd_unicode_prompts_run_through_the_api(client, kind):
    trace = _api(client, ODD_PROMPTS[kind], max_new_tokens=6)
    assert trace.stats.generated_tokens > 0 and trace.error is None


def _raw_api(app_url: str, data: list) -> tuple[str, str]:
    """Call /run_ensemble with hand-written JSON (what gradio_client refuses to send): (event, payload)."""
    import httpx

    root = app_url.rstrip("/")
    body = json.dumps(data and {"data": data})  # ASCII escapes for lone surrogates, NaN as a JSON extension
    event = httpx.post(f"{root}/gradio_api/call/run_ensemble", content=body, headers={"content-type": "application/json"}).json()
    stream = httpx.get(f"{root}/gradio_api/call/run_ensemble/{event['event_id']}", timeout=300).text
    kind = stream.split("event:", 1)[1].split("\n", 1)[0].strip()
    return kind, stream.split("data:", 1)[1].split("\n", 1)[0].strip()


def test_lone_surrogate_through_the_raw_http_api(app_url):
    kind, payload = _raw_api(app_url, [ODD_PROMPTS["lone_surrogate"], "single", "smollm2", {"max_new_tokens": 4}])
    assert kind == "complete"
    trace = RunTrace.from_dict(json.loads(payload)[0])
    assert any("surrogate" in w for w in trace.warnings) and trace.stats.generated_tokens > 0


def test_nan_temperature_through_the_raw_http_api(app_url):
    kind, payload = _raw_api(app_url, ["Hi", "safe", "smollm2,gemma3", {"temperature": float("nan")}])
    assert kind == "error" and "temperature must be a finite number" in payload


def test_huge_prompt_is_trimmed_with_a_visible_warning(client):
    prompt = ("Plovdiv is one of the oldest cities in Europe. " * 1100)[:50_000] + "\nIn one word: which city?"
    trace = _api(client, prompt, method="single", models="smollm2", max_new_tokens=4, max_prompt_tokens=512)
    assert any(f"{len(prompt):,} characters" in w and "only its last" in w for w in trace.warnings)
    assert len(trace.prompt) < 50_000 and trace.prompt.endswith("which city?")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_new_tokens": 0}, "max_new_tokens"),
        ({"max_new_tokens": -5}, "max_new_tokens"),
        ({"lookahead": 0}, "lookahead"),
        ({"top_k": 10**9}, "top_k"),
        ({"temperature": -1}, "temperature"),
    ],
)
def test_invalid_settings_through_the_api(client, kwargs, message):
    with pytest.raises(Exception, match=message):
        _api(client, "Hi", **kwargs)
    assert client.predict(text="ok", models="smollm2", api_name="/tokenize")["models"]["smollm2"]["count"] == 1


@pytest.mark.parametrize(
    ("method", "kwargs", "message"),
    [
        ("specem", {"segment_len": 0}, "segment_len"),
        ("specem", {"eta": -1}, "eta"),
        ("specem", {"verifiers": []}, "verifiers set is empty"),
    ],
)
def test_invalid_specem_settings_through_the_api(client, method, kwargs, message):
    with pytest.raises(Exception, match=message):
        _api(client, "Hi", method=method, **kwargs)


@pytest.mark.timing
def test_hub_model_while_offline_is_a_quick_clear_message(client, monkeypatch):
    monkeypatch.setenv("ENSEMBLE_LENS_ALLOW_PATHS", "1")  # hub ids and paths are the operator's opt-in
    started = time.perf_counter()
    with pytest.raises(Exception, match="Hugging Face Hub"):
        _api(client, "Hi", models="smollm2,someone/not-a-cached-model", max_new_tokens=2)
    assert time.perf_counter() - started < 20  # no 50-second retry loop
    assert _api(client, "Say ok.", models="smollm2", method="single", max_new_tokens=2).text


@pytest.mark.parametrize("kind", list(ODD_PROMPTS))
def test_odd_unicode_prompts_through_the_cli(kind, tmp_path):
    path = tmp_path / "prompt.txt"  # a file: argv cannot carry NUL or a lone surrogate
    path.write_bytes(ODD_PROMPTS[kind].encode("utf-8", "surrogatepass"))
    out = subprocess.run(
        [sys.executable, "-m", "ensemble", "generate", "--models", "smollm2", "--prompt-file", str(path),
         "--max-new-tokens", "4", "--json"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["stats"]["generated_tokens"] > 0


def test_uploads_are_json_only_and_size_checked(tmp_path):
    import pickle

    from ui import replay

    class Request:
        session_hash = "upload-test"

    evil = tmp_path / "evil.json"
    evil.write_bytes(pickle.dumps({"x": 1}))  # a pickle disguised as JSON is refused, never unpickled
    _, status, *_ = replay.import_trace(str(evil), Request())
    assert "Could not load the trace" in status
    big = tmp_path / "big.json"
    big.write_bytes(b" " * (20 * 1024 * 1024 + 1))
    _, status, *_ = replay.import_trace(str(big), Request())
    assert "20 MB" in status


# -- 3. load -------------------------------------------------------------------------------------------------
@pytest.mark.concurrency
@pytest.mark.timing
def test_eight_concurrent_clients_each_get_their_own_trace(app_url, client):
    names = ["Varna", "Ruse", "Burgas", "Pleven", "Sliven", "Dobrich", "Shumen", "Pernik"]
    prompts = [f"Write one sentence about the Bulgarian city of {name}." for name in names]

    def one(prompt):
        own = Client(app_url, verbose=False)
        data = own.predict(prompt=prompt, method="safe", models="smollm2,gemma3",
                           settings={"max_new_tokens": 32}, api_name="/run_ensemble")
        return RunTrace.from_dict(data)

    tokenize_latencies = []
    with ThreadPoolExecutor(max_workers=8) as pool:
        futures = [pool.submit(one, p) for p in prompts]
        while not all(f.done() for f in futures):  # the cheap endpoint keeps answering under load
            started = time.perf_counter()
            client.predict(text="Sofia", models="smollm2", api_name="/tokenize")
            tokenize_latencies.append(time.perf_counter() - started)
            time.sleep(1.0)
        traces = [f.result() for f in futures]
    for prompt, trace in zip(prompts, traces, strict=True):
        assert trace.prompt == prompt  # no cross-session leakage
        assert trace.stats.generated_tokens > 0 and trace.method == "safe"
    # Greedy runs are deterministic: every run under load equals the same run alone, token for token.
    models = _models(["smollm2", "gemma3"])
    for prompt, trace in zip(prompts, traces, strict=True):
        alone = generate(models, prompt, "safe", Settings(max_new_tokens=32))
        assert trace.text == alone.text, prompt
        assert [(t.text, t.decision) for t in trace.tokens] == [(t.text, t.decision) for t in alone.tokens]
    assert tokenize_latencies and max(tokenize_latencies) < 30


def _models(names):
    from ui import config

    return [config.POOL.get(n) for n in names]


@pytest.mark.concurrency
def test_a_bounded_queue_tells_extra_clients_the_server_is_busy(pool, embedded):
    import app
    from tests.conftest import free_port
    from ui import config

    previous = config.QUEUE_SIZE
    config.QUEUE_SIZE = 2
    try:
        small = app.build_app()
    finally:
        config.QUEUE_SIZE = previous
    port = free_port()
    small.launch(server_port=port, prevent_thread_lock=True, quiet=True)
    try:
        url = f"http://127.0.0.1:{port}/"
        clients = [Client(url, verbose=False) for _ in range(8)]
        jobs = [c.submit(prompt="Count to thirty.", method="single", models="smollm2",
                         settings={"max_new_tokens": 48}, api_name="/run_ensemble") for c in clients]
        errors = []
        for job in jobs:
            try:
                job.result(timeout=600)
            except Exception as exc:  # noqa: BLE001 - the rejection is what we look for
                errors.append(str(exc))
        assert errors and all("Queue is full" in e for e in errors), errors
        assert len(errors) < 8  # the ones that fit in the queue were served
        # and the server goes on serving after turning clients away
        again = Client(url, verbose=False).predict(text="still here", models="smollm2", api_name="/tokenize")
        assert again["models"]["smollm2"]["count"] > 0
    finally:
        small.close()


# -- 4. cancellation -----------------------------------------------------------------------------------------
@pytest.mark.concurrency
def test_stop_frees_the_run_within_one_pass_and_the_next_run_is_clean(embedded):
    models = [embedded["qwen"], embedded["smollm2"], embedded["gemma3"]]
    prompt = "Write a long story about a journey from Sofia to Plovdiv."
    for method in ("safe", "specem", "unite"):
        cancel = threading.Event()
        job = EnsembleRun(models, prompt, method, Settings(max_new_tokens=200), cancel=cancel)
        at_stop: list[list[int]] = []

        def stop(job=job, cancel=cancel, at_stop=at_stop):
            at_stop.append([a.stats.passes for a in job.adapters])  # the passes done (or in flight) when Stop lands
            cancel.set()

        for event in job.events():
            if isinstance(event, TokenEvent) and event.record.index >= 6 and not at_stop:
                threading.Timer(0.3, stop).start()  # Stop pressed mid-step
                at_stop.append(None)
        assert job.trace.stats.stop_reason == "cancelled"
        # Counted in passes, not seconds (a loaded machine stretches seconds): after Stop, each member finishes at
        # most the pass it is in; no new one starts.
        after = [a.stats.passes - before for a, before in zip(job.adapters, at_stop[1], strict=True)]
        assert max(after) <= 1 and sum(after) <= len(job.adapters), f"{method}: passes after Stop {after}"
        # the partial trace is complete and consistent
        assert job.trace.text == "".join(job.trace.text[t.start : t.end] for t in job.trace.tokens if t.end > t.start)
    clean = generate(models, prompt, "safe", Settings(max_new_tokens=24))
    again = generate(models, prompt, "safe", Settings(max_new_tokens=24))
    assert clean.text == again.text and clean.stats.decisions == again.stats.decisions


def test_cancel_flag_raises_before_the_next_forward_pass(tiny):
    from ensemble.members import RunPolicy
    from ensemble.methods.member import ModelAdapter

    adapter = ModelAdapter(tiny["smollm2"])
    adapter.start("hi")
    adapter.configure(RunPolicy(cancel=threading.Event()))
    adapter.next_logits()
    adapter.append(5)
    adapter.policy.cancel.set()
    with pytest.raises(Cancelled):
        adapter.next_logits()


# -- 5. faults -----------------------------------------------------------------------------------------------
class Exploding(torch.nn.Module):
    """A model that works for a few forward passes, then raises (a GPU error, a bad kernel, ...)."""

    def __init__(self, inner, after: int):
        super().__init__()
        self.inner, self.after, self.calls = inner, after, 0
        self.config = inner.config
        self.generation_config = inner.generation_config

    def forward(self, *args, **kwargs):
        self.calls += 1
        if self.calls > self.after:
            raise RuntimeError("simulated device failure")
        return self.inner(*args, **kwargs)

    def get_output_embeddings(self):
        return self.inner.get_output_embeddings()


def test_a_model_failing_mid_generation_gives_a_message_and_the_next_run_works(client, embedded, monkeypatch):
    from ui import config

    healthy = embedded["smollm2"]
    broken = models.wrap("gemma3", Exploding(embedded["gemma3"].model, after=3), embedded["gemma3"].tokenizer, template="plain")
    monkeypatch.setattr(config, "load_models", lambda names, progress=None: [healthy, broken])
    with pytest.raises(Exception, match="simulated device failure"):
        _api(client, "Write two sentences about Plovdiv.", max_new_tokens=40)
    monkeypatch.undo()
    trace = _api(client, "Write two sentences about Plovdiv.", max_new_tokens=8)
    assert trace.error is None and trace.stats.generated_tokens > 0


def _quiet_gap(size: int, length: int) -> int:
    """An offset where ``length`` bytes touch none of the sampled digest's blocks."""
    block, count = integrity._BLOCK, integrity._SAMPLE_BLOCKS
    first_end = (size - block) // (count - 1) + block  # end of the second sampled block
    second = (size - block) * 2 // (count - 1)  # start of the third
    assert second - first_end > length
    return first_end + (second - first_end - length) // 2


def _overwrite(path, offset: int, data: bytes, keep_times: bool = False) -> None:
    before = path.stat()
    with path.open("r+b") as fh:
        fh.seek(offset)
        fh.write(data)
    if keep_times:  # a careful attacker (or a restore tool) puts the old mtime back; ctime still moves
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))


def _replace_same_size(path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    before = path.stat()
    tmp = path.with_name(path.name + ".new")
    tmp.write_bytes(bytes(data))
    os.utime(tmp, ns=(before.st_atime_ns, before.st_mtime_ns))
    tmp.replace(path)  # a new inode with the old size and mtime


CACHE_FAULTS = {
    "4 KB of zeros mid-file": (lambda d: _overwrite(d / "model.safetensors", (d / "model.safetensors").stat().st_size // 2, b"\0" * 4096),
                               "fails the full checksum of model.safetensors"),
    "1 MB of 0xFF between sampled blocks": (
        lambda d: _overwrite(d / "model.safetensors", _quiet_gap((d / "model.safetensors").stat().st_size, 1 << 20), b"\xff" * (1 << 20)),
        "fails the full checksum of model.safetensors"),
    "damage with the mtime put back": (
        lambda d: _overwrite(d / "model.safetensors", _quiet_gap((d / "model.safetensors").stat().st_size, 4096), b"\x01" * 4096, True),
        "fails the full checksum of model.safetensors"),
    "a same-size copy with one byte flipped": (lambda d: _replace_same_size(d / "tokenizer.json"),
                                               "fails the full checksum of tokenizer.json"),
    "truncated weights": (lambda d: os.truncate(d / "model.safetensors", 1000), "has model.safetensors at the wrong size"),
    "bytes appended": (lambda d: (d / "config.json").open("ab").write(b" "), "has config.json at the wrong size"),
    "a file deleted": (lambda d: (d / "config.json").unlink(), "is missing config.json"),
    "manifest deleted": (lambda d: (d / "manifest.json").unlink(), "is not prepared yet"),
    "manifest not JSON": (lambda d: (d / "manifest.json").write_text("{not json"), "has an unreadable manifest"),
}


@pytest.fixture
def cache_copy(tmp_path, monkeypatch):
    """A private copy of SmolLM2's prepared cache (the shared one stays untouched)."""
    source = models.prepare("smollm2", models.quiet_progress)
    monkeypatch.setenv("ENSEMBLE_LENS_CACHE", str(tmp_path))
    copy = cache.model_cache(models.EMBEDDED["smollm2"])
    shutil.copytree(source, copy)
    assert integrity.verify_manifest(copy, full="changed") is None  # a copy is checked in full once
    assert integrity.changed_files(copy, json.loads((copy / "manifest.json").read_text())["files"]) == []
    return source, copy


@pytest.mark.parametrize("fault", list(CACHE_FAULTS))
def test_cache_fault_matrix_every_fault_is_detected_before_a_load(cache_copy, fault):
    _, copy = cache_copy
    damage, problem = CACHE_FAULTS[fault]
    damage(copy)
    assert integrity.verify_manifest(copy, full="changed") == problem


def test_an_unchanged_cache_is_not_read_in_full_again(cache_copy, monkeypatch):
    _, copy = cache_copy

    def no_full_read(path):
        raise AssertionError(f"{path} was read in full although it did not change")

    monkeypatch.setattr(integrity, "file_crc32", no_full_read)
    assert models.prepare("smollm2", models.quiet_progress) == copy


def test_a_damaged_cache_is_rebuilt_byte_identical_before_the_run(cache_copy, embedded):
    """The issue's case: 1 MB of 0xFF where no sampled block looks. The load checks the changed file in
    full first, says so, rebuilds, and the run gives the right answer."""
    source, copy = cache_copy
    CACHE_FAULTS["1 MB of 0xFF between sampled blocks"][0](copy)
    messages = []
    pool = models.ModelPool(dtype="float32", runtime="transformers")
    rebuilt = pool.get("smollm2", lambda message, fraction: messages.append(message))
    assert any("fails the full checksum of model.safetensors; rebuilding" in m for m in messages)
    for path in source.iterdir():
        if path.is_file() and path.name != integrity.VERIFIED:
            assert file_sha256(copy / path.name) == file_sha256(path), path.name
    answer = generate([rebuilt], "Say hi.", "single", Settings(max_new_tokens=6))
    assert answer.text == generate([embedded["smollm2"]], "Say hi.", "single", Settings(max_new_tokens=6)).text
    assert answer.stats.stop_reason in ("eos", "budget") and "<|endoftext|>" not in answer.text
    assert integrity.changed_files(copy, json.loads((copy / "manifest.json").read_text())["files"]) == []


def test_gguf_with_a_wrong_checksum_is_refused(tmp_path, monkeypatch):
    spec = models.EMBEDDED["smollm2"]
    bad = models.ModelSpec(**{**spec.__dict__, "embedded": models.EmbeddedSource(**{**spec.embedded.__dict__, "sha256": "0" * 64})})
    with pytest.raises(ModelLoadError, match="sha256"):
        cache.assemble_gguf(bad, tmp_path / "x.gguf", models.quiet_progress)


# -- 6. memory -----------------------------------------------------------------------------------------------
@pytest.mark.soak
def test_twenty_runs_do_not_grow_memory(client):
    process = psutil.Process()

    def rss() -> int:
        gc.collect()
        return process.memory_info().rss

    _api(client, "Name three rivers in Bulgaria.", max_new_tokens=16)
    baseline = rss()
    for i in range(19):
        _api(client, f"Name three rivers in Bulgaria. ({i})", max_new_tokens=16)
    growth = (rss() - baseline) / baseline
    assert growth < 0.05, f"resident memory grew {growth:.1%} over 20 runs"


def test_tokenize_text_length_limit_is_the_prompt_limit(client):
    """/tokenize and the Tokenizers tab take what the app takes as a prompt (200,000 characters) and say so past it."""
    from ensemble.tokens.key_table import MAX_PROMPT_CHARS
    from ui import tokenizers

    at_limit = ("Sofia went to Plovdiv. " * (MAX_PROMPT_CHARS // 23 + 1))[:MAX_PROMPT_CHARS]
    result = client.predict(text=at_limit, models="smollm2", api_name="/tokenize")
    assert len(result["text"]) == MAX_PROMPT_CHARS and result["models"]["smollm2"]["count"] > 10_000
    over = at_limit + "x"
    with pytest.raises(Exception, match=f"{MAX_PROMPT_CHARS + 1:,} characters; the limit is {MAX_PROMPT_CHARS:,}"):
        client.predict(text=over, models="smollm2", api_name="/tokenize")
    view, counts = tokenizers.tokenize_view(over, ["smollm2", "gemma3"], False)  # the Tokenizers tab's handler
    assert f"the limit is {MAX_PROMPT_CHARS:,}" in view and 'class="el-error"' in view and counts is None
