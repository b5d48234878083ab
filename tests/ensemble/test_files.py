"""Output files are written whole or not at all, name the file when they fail, and never lose a run: the
atomic writer (``ensemble.files``) and the command line's use of it, in process with the tiny models."""

from __future__ import annotations

import errno
import json
import os

import pytest

from ensemble import files as outputs
from ensemble.cli import main
from ensemble.errors import OutputError


def _fail(err: int):
    def raise_(*args, **kwargs):
        raise OSError(err, os.strerror(err))

    return raise_


def test_a_failed_write_names_the_file_and_leaves_it_as_it_was(tmp_path, monkeypatch):
    target = tmp_path / "trace.json"
    target.write_text("the old trace")
    monkeypatch.setattr(os, "fsync", _fail(errno.ENOSPC))  # the disk fills while the file is written
    with pytest.raises(OutputError, match=r"Could not save '.*trace\.json': No space left on device"):
        outputs.write_output(target, "x" * 100_000)
    assert target.read_text() == "the old trace"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["trace.json"]  # no temporary file left behind
    monkeypatch.undo()
    fresh = tmp_path / "new.json"
    monkeypatch.setattr(os, "replace", _fail(errno.EROFS))  # the folder turned read-only before the rename
    with pytest.raises(OutputError, match=r"new\.json"):
        outputs.write_output(fresh, "{}")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["trace.json"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_a_read_only_folder_is_one_line_and_no_file(tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o500)
    try:
        with pytest.raises(OutputError, match=r"ro/trace\.json"):
            outputs.write_output(folder / "trace.json", "{}")
        assert list(folder.iterdir()) == []
    finally:
        folder.chmod(0o700)


def test_a_written_file_is_whole_and_readable_like_open_makes_it(tmp_path):
    target = tmp_path / "out.csv"
    with outputs.atomic_output(target, newline="") as fh:
        fh.write("a,b\r\n1,2\r\n")
    assert target.read_bytes() == b"a,b\r\n1,2\r\n"
    assert target.stat().st_mode & 0o777 == 0o666 & ~outputs._umask()


@pytest.mark.parametrize("second", ["{d}/same.json", "{d}/./same.json", "{d}/sub/../same.json", "{d}/link.json"])
def test_out_and_html_naming_one_file_are_refused(tmp_path, second):
    (tmp_path / "sub").mkdir()
    (tmp_path / "same.json").write_text("{}")
    (tmp_path / "link.json").symlink_to(tmp_path / "same.json")
    with pytest.raises(OutputError, match="--out and --html name the same file"):
        outputs.check_distinct_outputs(out=str(tmp_path / "same.json"), html=second.format(d=tmp_path))
    outputs.check_distinct_outputs(out=str(tmp_path / "same.json"), html=str(tmp_path / "same.html"))


def test_generate_refuses_one_file_for_out_and_html_before_any_model(tmp_path, capsys):
    code = main(["generate", "--models", "qwen", "--prompt", "hi", "--out", str(tmp_path / "r.json"),
                 "--html", f"{tmp_path}/./r.json"])
    assert code == 2 and "--out and --html name the same file" in capsys.readouterr().err
    assert not (tmp_path / "r.json").exists()


@pytest.fixture
def tiny_cli(tiny, monkeypatch):
    """``generate`` in this process with the tiny models standing for qwen and smollm2."""
    from ensemble import preflight
    from ensemble.models import ModelPool

    monkeypatch.setattr(preflight, "resolve", lambda name: None)  # the one preflight checks each name is a model
    monkeypatch.setattr(ModelPool, "get_many", lambda self, names, *a, **k: [tiny[n] for n in names])


def test_with_json_the_trace_is_printed_when_out_cannot_be_saved(tmp_path, tiny_cli, monkeypatch, capsys):
    target = tmp_path / "trace.json"
    monkeypatch.setattr(os, "fsync", _fail(errno.ENOSPC))
    code = main(["generate", "--method", "single", "--models", "smollm2", "--prompt", "Say hi.",
                 "--max-new-tokens", "4", "--backend", "local", "--runtime", "transformers", "--json", "--out", str(target)])
    out = capsys.readouterr()
    assert code == 2
    assert json.loads(out.out)["method"] == "single"  # the run is not lost
    assert "Could not save" in out.err and "trace.json" in out.err and "No space left" in out.err
    assert list(tmp_path.iterdir()) == []  # neither a 0-byte file nor a temporary one


def test_html_is_still_saved_when_out_fails(tmp_path, tiny_cli, monkeypatch, capsys):
    real_replace = os.replace

    def replace(src, dst):
        if str(dst).endswith(".json"):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS))
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    code = main(["generate", "--method", "single", "--models", "smollm2", "--prompt", "Say hi.", "--max-new-tokens", "3",
                 "--backend", "local", "--runtime", "transformers", "--out", str(tmp_path / "t.json"),
                 "--html", str(tmp_path / "t.html")])
    err = capsys.readouterr().err
    assert code == 2 and "t.json" in err and "--json" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.html"]
