"""Shared fixtures: the embedded models (loaded once per session) and tiny models with the real tokenizers."""

from __future__ import annotations

import contextlib
import lzma
import os
import shutil
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, settings

from ensemble import models

ROOT = Path(__file__).resolve().parents[1]
"""The repository's root: tests import it (and ``FIXTURES``) from here, wherever their folder sits."""
FIXTURES = ROOT / "tests" / "fixtures"

settings.register_profile(
    "ensemble",
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture, HealthCheck.data_too_large],
    derandomize=True,
)
settings.load_profile("ensemble")
# Under pytest-xdist (``make test-fast``) each worker gets one core; alone, the tests use up to two threads.
torch.set_num_threads(1 if os.environ.get("PYTEST_XDIST_WORKER") else max(1, min(2, os.cpu_count() or 1)))

# The app's own pool runs members in process in tests (test_members.py covers the Ray backend; the app would
# otherwise pick it on a multi-core machine and start member processes for every app test).
os.environ.setdefault("ENSEMBLE_LENS_BACKEND", "local")
os.environ.setdefault("ENSEMBLE_LENS_RUNTIME", "transformers")  # the app under test: parity with the transformers pool

REAL_MODEL_FIXTURES = {"embedded", "app_url"}


def pytest_collection_modifyitems(items):
    """A test that loads the real models is ``embedded`` whether or not it says so, so that
    ``pytest -m "not embedded"`` (the fast unit tier) never needs the model packages or their cache."""
    for item in items:
        if REAL_MODEL_FIXTURES & set(getattr(item, "fixturenames", ())) and not item.get_closest_marker("embedded"):
            item.add_marker(pytest.mark.embedded)

EMBEDDED = ("qwen", "smollm2", "gemma3")


@pytest.fixture(scope="session")
def pool() -> models.ModelPool:
    # float32: the invariants (cache == full recompute, verify-in-line == separate scoring) are checked at
    # atol 1e-4, tighter than bfloat16's precision; the app and CLI default to bfloat16 where it is fast. Both sides
    # of each run on one kernel set, so only the order of the sums differs; on the tiny models the invariants hold at
    # 1e-4 with AVX-512, AVX2 and no-vector kernels alike (issue 39), where between two kernel sets a logit moved
    # by up to 1.1e-4 (the golden traces' comparison allows for that, tests/ensemble/methods/test_golden_traces.py).
    # transformers: the parity tests compare with transformers' generate(); test_llamacpp.py has its own pool
    return models.ModelPool(dtype="float32", runtime="transformers")


@pytest.fixture(scope="session")
def llama_pool() -> models.ModelPool:
    """The embedded models on llama.cpp (CI builds llama-cpp-python and sets ENSEMBLE_LENS_REQUIRE_LLAMACPP=1)."""
    from ensemble.models.runtimes import runtime_info

    if not runtime_info("llamacpp").available():
        if os.environ.get("ENSEMBLE_LENS_REQUIRE_LLAMACPP") == "1":
            pytest.fail("llama-cpp-python is not installed: make deps builds it once into ~/.cache/ensemble-lens-wheels")
        pytest.skip("llama-cpp-python is not installed (make deps installs it)")
    return models.ModelPool(runtime="llamacpp")


@pytest.fixture(scope="session")
def embedded(pool) -> dict[str, models.LoadedModel]:
    """The three embedded models (``make test`` prepares their cache first)."""
    return {name: pool.get(name, models.quiet_progress) for name in EMBEDDED}


TOKENIZER_FIXTURES = FIXTURES / "tokenizers"


def unpack_tokenizer_fixture(name: str, folder: Path) -> Path:
    """Write the shipped tokenizer files of an embedded model into ``folder``, in the layout
    :func:`models.load_saved_tokenizer` reads. ``tokenizer.json`` is stored xz-compressed in numbered parts under
    1 MB each (``tokenizer.json.xz.00``, ``.01``...: a hub refuses larger binary files outside LFS), joined here."""
    source = TOKENIZER_FIXTURES / name
    folder.mkdir(parents=True, exist_ok=True)
    parts = sorted(source.glob("tokenizer.json.xz.[0-9][0-9]"))
    (folder / "tokenizer.json").write_bytes(lzma.decompress(b"".join(p.read_bytes() for p in parts)))
    for file in source.iterdir():
        if file not in parts:
            shutil.copyfile(file, folder / file.name)
    return folder


@pytest.fixture(scope="session")
def tokenizers(tmp_path_factory) -> dict:
    """The real tokenizers of the embedded models, from the files shipped in ``tests/fixtures/tokenizers``: no
    model package, no weights, no de-quantization (``test_models`` checks they equal the prepared ones)."""
    root = tmp_path_factory.mktemp("tokenizers")
    return {name: models.load_saved_tokenizer(unpack_tokenizer_fixture(name, root / name)) for name in EMBEDDED}


@pytest.fixture(scope="session")
def tables(tokenizers) -> dict:
    """The key tables of the real tokenizers (every end-of-sequence id mapped to the shared stop key)."""
    from ensemble.tokens.key_table import KeyTable

    return {name: KeyTable(tok, len(tok), {tok.eos_token_id}) for name, tok in tokenizers.items()}


def _tiny(kind: str, tokenizer):
    """A small random model of the embedded model's architecture, with its real vocabulary."""
    from transformers import (
        Gemma3ForCausalLM,
        Gemma3TextConfig,
        LlamaConfig,
        LlamaForCausalLM,
        Qwen2Config,
        Qwen2ForCausalLM,
    )

    torch.manual_seed({"qwen": 1, "smollm2": 2, "gemma3": 3}[kind])
    vocab = len(tokenizer)
    common = dict(
        vocab_size=vocab,
        hidden_size=64,
        intermediate_size=128,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        # Wider initial weights than the default 0.02 give peaked next-token distributions like a trained
        # model's (a near-uniform distribution makes every tie-break and duplicate key decisive).
        initializer_range=0.4,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.bos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    if kind == "qwen":
        model = Qwen2ForCausalLM(Qwen2Config(num_hidden_layers=2, **common))
    elif kind == "smollm2":
        model = LlamaForCausalLM(LlamaConfig(num_hidden_layers=2, tie_word_embeddings=True, **common))
    else:
        config = Gemma3TextConfig(
            num_hidden_layers=3,
            head_dim=16,
            sliding_window=12,  # small, so that tests cross the sliding window
            layer_types=["sliding_attention", "sliding_attention", "full_attention"],
            **common,
        )
        model = Gemma3ForCausalLM(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model.eval()


@pytest.fixture(scope="session")
def tiny(tokenizers) -> dict[str, models.LoadedModel]:
    """Tiny random models (2-3 layers, hidden 64) with the real tokenizers and templates."""
    out = {}
    for name, tok in tokenizers.items():
        template = "plain" if name == "gemma3" else "auto"
        out[name] = models.wrap(f"tiny-{name}", _tiny(name, tok), tok, template=template)
    return out


class Scripted(torch.nn.Module):
    """A tiny model whose logits always pick the next token of a script (then end of sequence): the engine's
    caches, crops and passes run as usual, only the choice is forced."""

    def __init__(self, inner, script: list[int], eos: int):
        super().__init__()
        self.inner, self.script, self.eos = inner, script, eos
        self.config, self.generation_config = inner.config, inner.generation_config
        self.prompt_len = 0

    def get_output_embeddings(self):
        return self.inner.get_output_embeddings()

    def forward(self, input_ids, past_key_values=None, logits_to_keep=0, **kwargs):
        past = past_key_values.get_seq_length() if past_key_values is not None else 0
        out = self.inner(input_ids=input_ids, past_key_values=past_key_values, logits_to_keep=logits_to_keep, **kwargs)
        positions = list(range(past, past + input_ids.shape[1]))
        if isinstance(logits_to_keep, int):
            rows = positions[-logits_to_keep:] if logits_to_keep else positions
        else:
            rows = [positions[i] for i in logits_to_keep.tolist()]
        logits = torch.full_like(out.logits, -30.0)
        for row, position in enumerate(rows):
            nxt = position + 1 - self.prompt_len  # the response token this row predicts
            logits[0, row, self.script[nxt] if 0 <= nxt < len(self.script) else self.eos] = 30.0
        out.logits = logits
        return out


def scripted_model(tiny_model, name: str, target: str, prompt: str):
    """``tiny_model`` made to write ``target`` (its own tokenization of it) as the answer to ``prompt``, then end;
    returns the model and its script (token ids)."""
    keys = tiny_model.keys
    script = keys.encode(target)
    eos = min(keys.eos_ids)
    model = Scripted(tiny_model.model, script, eos)
    loaded = models.wrap(name, model, tiny_model.tokenizer, template=tiny_model.template.kind)
    model.prompt_len = len(loaded.prompt_ids(prompt))
    return loaded, script


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def app_url(pool, embedded):
    """The real app, served in this process on a free port, sharing the session's loaded models."""
    import app
    from ui import config

    config.POOL = pool
    port = free_port()
    app.launch(port=port, block=False)
    yield f"http://127.0.0.1:{port}/"
    app.demo.close()


CHROMIUM = "/usr/bin/chromium"


@pytest.fixture(scope="session")
def browser():
    """Debian's Chromium driven by Playwright (browser downloads are not possible here)."""
    if not os.path.exists(CHROMIUM):
        if os.environ.get("ENSEMBLE_LENS_REQUIRE_BROWSER") == "1":
            pytest.fail(f"{CHROMIUM} is missing: install Debian's chromium (make browser)")
        pytest.skip(f"{CHROMIUM} is missing: install Debian's chromium (make browser) to run browser tests")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM,
            args=["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-quic", "--no-first-run", "--disable-component-update", "--disable-sync"],
        )
        yield browser
        browser.close()


@contextlib.contextmanager
def app_page(browser, app_url: str, width: int = 1400, height: int = 1000, timeout_ms: int = 120_000):
    """The app opened in a fresh browser context of this viewport, its form ready; the context closes after."""
    context = browser.new_context(viewport={"width": width, "height": height}, accept_downloads=True)
    try:
        page = context.new_page()
        page.set_default_timeout(timeout_ms)
        page.goto(app_url)
        page.wait_for_selector("#run-button")
        yield page
    finally:
        context.close()


@pytest.fixture
def page(browser, app_url):
    with app_page(browser, app_url) as opened:
        yield opened
