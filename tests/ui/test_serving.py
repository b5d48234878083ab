"""Where the app is served: the defaults it opens on, the first view's label, Gradio's Spaces hot reload, and the
``ensemble-lens`` command (tests/test_space.py runs all of it as a Space does)."""

from __future__ import annotations

import importlib
import types

import pytest

from ensemble.models import ModelPool, runtimes
from ui import serve, space


def test_the_forms_open_on_the_models_the_server_could_load():
    gone = {"gemma3": "gated"}
    assert space.usable(["qwen", "smollm2", "gemma3"], gone) == ["qwen", "smollm2"]
    assert space.usable(["gemma3@llamacpp", "qwen"], gone) == ["qwen"]
    assert space.usable(["gemma3"], gone) == ["gemma3"]  # nothing left: the form keeps it and the run says why
    assert space.usable(["qwen", "gemma3"], {}) == ["qwen", "gemma3"]


def test_warm_remembers_what_it_could_not_load(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    pool = ModelPool()
    problems = pool.warm(["someone/not-cached-model"])
    assert len(problems) == 1 and set(pool.unavailable) == {"someone/not-cached-model"}
    assert "could not be reached" in pool.unavailable["someone/not-cached-model"]


@pytest.mark.parametrize(("has_llamacpp", "label"), [(False, "transformers"), (True, "llama.cpp")])
def test_the_first_view_names_the_runtime_a_run_here_uses(monkeypatch, has_llamacpp, label):
    """The recording was made on llama.cpp; a Space has no llama.cpp and runs transformers: the label says so."""
    monkeypatch.setattr(runtimes.RuntimeInfo, "available", lambda self: has_llamacpp or not self.can_be_missing)
    text = space.first_view_status("safe", ["qwen", "smollm2", "gemma3"], "2026-11-30T10:00:00", "auto", "cpu", {})
    assert f"run it live here (on the {label} runtime)" in text and "recorded 2026-11-30" in text and "Not available" not in text
    assert "(llamacpp)" not in text and text.startswith("A recorded run, not a live one: SAFE on")  # words, not ids
    gated = space.first_view_status("safe", ["qwen"], "2026-11-30", "auto", "cpu", {"gemma3": "Accept its licence; HF_TOKEN."})
    assert "Not available on this server: gemma3. Accept its licence; HF_TOKEN." in gated


def test_the_spaces_hot_reload_is_left_off_where_the_spaces_package_is_missing(monkeypatch):
    real = importlib.import_module("gradio.http_server")
    assert callable(real.watchfn_spaces)  # what Gradio's launch runs on a Space (SYSTEM=spaces)
    assert importlib.util.find_spec("spaces") is None  # as in requirements.txt
    fake = types.SimpleNamespace(watchfn_spaces=real.watchfn_spaces)
    monkeypatch.delenv("SYSTEM", raising=False)
    assert space.quiet_spaces_reloader(fake, warn=lambda m: None) is False and fake.watchfn_spaces is real.watchfn_spaces
    monkeypatch.setenv("SYSTEM", "spaces")
    said = []
    assert space.quiet_spaces_reloader(fake, warn=said.append) is True
    assert fake.watchfn_spaces(object()) is None and "hot reload off" in said[0]
    with pytest.raises(RuntimeError, match="spaces"):  # what the watcher thread died of before
        real.watchfn_spaces(object())


def test_the_ensemble_lens_command_helps_and_sets_only_what_it_is_given(capsys):
    with pytest.raises(SystemExit) as done:
        serve.main(["--help"])
    assert done.value.code == 0 and "usage: ensemble-lens" in capsys.readouterr().out
    args = serve.build_parser().parse_args(["--port", "8000", "--host", "0.0.0.0", "--runtime", "transformers", "--no-warmup"])
    assert serve.environment(args) == {"GRADIO_SERVER_NAME": "0.0.0.0", "GRADIO_SERVER_PORT": "8000",
                                       "ENSEMBLE_LENS_RUNTIME": "transformers", "ENSEMBLE_LENS_NO_WARMUP": "1"}
    assert serve.environment(serve.build_parser().parse_args([])) == {}
