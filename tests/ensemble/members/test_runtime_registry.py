"""The runtimes, registered like the methods (:mod:`ensemble.models.runtimes`): each declares what it can do and
names its code; a new runtime is one registration, and nothing else knows it by name (``tests/test_layers.py``)."""

from __future__ import annotations

import dataclasses
import importlib.util

import pytest

from ensemble import models
from ensemble.errors import InputError, SettingsError
from ensemble.members.transformers import CachedModel
from ensemble.methods import generate
from ensemble.models import runtimes
from ensemble.models.access import offered_members
from ensemble.settings import Settings

_HELD: dict = {}


class _Counted(CachedModel):
    """A runtime only this test registers: transformers passes, counted."""

    built = 0

    @classmethod
    def for_loaded(cls, loaded):
        cls.built += 1
        return super().for_loaded(loaded)


def _load_counted(spec, base, device, dtype, progress, weights, runtime):
    """The registered loader of the test's runtime: the tiny model, under its runtime's name."""
    return dataclasses.replace(_HELD["model"], runtime=runtime, load_args=(base, device, dtype, runtime))


def test_every_registered_runtime_declares_what_it_can_do_and_names_code_that_exists():
    assert ("auto", *(r for r in runtimes.REGISTRY if not runtimes.REGISTRY[r].by_name)) == runtimes.RUNTIMES and runtimes.DEFAULT_RUNTIME == "transformers"
    for info in runtimes.REGISTRY.values():
        for part in ("loader", "computes", "prepares", "folder"):
            assert getattr(info, part) is None or callable(info.part(part)), (info.name, part)
        assert info.part("computes").gil_free == info.thread_safe  # the class's flag is the registration's
        computes = info.part("computes")
        assert info.whole_rows == (info.top_k is None) == computes.whole_rows  # top k only: a server's rows
        assert computes.remote == info.remote and info.verify_in_line and info.local_tokenizer
    assert runtimes.prepared_runtimes() == ["transformers", "llamacpp"]  # prepare --runtime all
    llama = runtimes.runtime_info("llamacpp")
    assert llama.label == "llama.cpp" and llama.can_be_missing and llama.thread_safe and not llama.runs_on("cuda:0")
    assert not runtimes.runtime_info("transformers").can_be_missing and runtimes.runtime_info("transformers").runs_on("cuda:0")
    with pytest.raises(SettingsError, match="Unknown runtime 'onnx'"):
        runtimes.runtime_info("onnx")


def test_a_runtime_whose_package_is_missing_is_neither_offered_nor_picked(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "llama_cpp" else real(name, *a))
    assert runtimes.available_runtimes() == ["transformers"]
    assert runtimes.pick_runtime(models.resolve("qwen"), "auto") == "transformers"
    with pytest.raises(InputError, match="cannot run models on llamacpp: llama-cpp-python is not installed here"):
        offered_members(["qwen"], ["qwen"], "llamacpp", "auto", ["auto", *runtimes.available_runtimes()])


def test_a_new_runtime_is_one_registration(monkeypatch, tiny):
    """Registered and nothing else: it is a runtime choice and a ``name@runtime`` suffix, models load through its
    loader, runs compute through its class, and the pool sizes its weights."""
    info = runtimes.RuntimeInfo("counted", "counted", loader=f"{__name__}:_load_counted", computes=f"{__name__}:_Counted",
                                tensors=True)  # no files to prepare
    monkeypatch.setitem(runtimes.REGISTRY, "counted", info)
    monkeypatch.setitem(_HELD, "model", tiny["smollm2"])
    assert runtimes.split_runtime("smollm2@counted") == ("smollm2", "counted")
    assert runtimes.check_runtime("counted") == "counted"
    loaded = models.load("smollm2@counted")
    assert loaded.runtime == "counted" and loaded.load_args == ("smollm2", "cpu", "auto", "counted")
    settings = Settings(max_new_tokens=4, stop_strings=[])
    built = _Counted.built
    trace = generate([loaded], "2 + 2 =", "single", settings)
    assert _Counted.built == built + 1
    assert trace.error is None and trace.text == generate([tiny["smollm2"]], "2 + 2 =", "single", settings).text
    assert models.model_bytes(loaded) == models.model_bytes(tiny["smollm2"]) > 0
    assert info.prepared("smollm2") and "counted" not in runtimes.prepared_runtimes()
