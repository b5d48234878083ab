"""The Results tab's uploads from anyone (issue 39, items 6, 8, 9 and 11): every hostile .zip answered with one
plain sentence and no server path, a damaged trace counted as missing, unpacked folders removed when refused,
replaced or dropped and counted in the sessions' budget; the explain endpoints bounded and reading numbers as meant."""

from __future__ import annotations

import gzip
import io
import json
import struct
import tempfile
import zipfile
from pathlib import Path

import gradio as gr
import pytest

from tests.conftest import ROOT
from ui import results
from ui.sessions import Sessions

FIXTURE = ROOT / "tests" / "fixtures" / "evaluation" / "gsm8k-3"


@pytest.fixture(autouse=True)
def own_tempdir(tmp_path, monkeypatch):
    """Unpacked uploads go under this test's own folder, so the test sees every one of them."""
    scratch = tmp_path / "server-tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    return scratch


def _unpacked(scratch: Path) -> list[Path]:
    return sorted(scratch.glob(results.UNPACKED_PREFIX + "*"))


def _zip(path: Path, replace: dict[str, bytes] | None = None) -> Path:
    """The fixture folder zipped under ``gsm8k-3/``, with some members' contents replaced."""
    replace = replace or {}
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for file in sorted(FIXTURE.rglob("*")):
            if file.is_file():
                relative = file.relative_to(FIXTURE).as_posix()
                zf.writestr(f"gsm8k-3/{relative}", replace.get(relative, file.read_bytes()))
    return path


def _understate(path: Path, member: str) -> None:
    """Make the central directory say ``member`` is 10 bytes long (its data is longer): reading it fails its CRC."""
    data = bytearray(path.read_bytes())
    name = member.encode()
    at = data.index(b"PK\x01\x02" + b"", data.index(name) - 64)
    while data[at + 46: at + 46 + len(name)] != name:
        at = data.index(b"PK\x01\x02", at + 4)
    struct.pack_into("<I", data, at + 24, 10)
    path.write_bytes(bytes(data))


def test_a_utf8_flagged_name_that_is_not_utf8_is_one_sentence(tmp_path, own_tempdir):
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        zf.writestr("gsm8k-3/meta.jsoA", "{}")
    raw = bytearray(buffer.getvalue().replace(b"meta.jsoA", b"meta.jso\xff"))
    for signature, flags in ((b"PK\x03\x04", 6), (b"PK\x01\x02", 8)):  # the name is flagged UTF-8 in both headers
        at = raw.index(signature) + flags
        struct.pack_into("<H", raw, at, struct.unpack_from("<H", raw, at)[0] | 0x800)
    (tmp_path / "bad.zip").write_bytes(bytes(raw))
    summary, _, folder = results.open_evaluation(tmp_path / "bad.zip")
    assert folder is None and "not valid UTF-8" in summary.results_view and not _unpacked(own_tempdir)


def test_a_header_that_understates_a_size_refuses_the_folder_and_leaves_nothing(tmp_path, own_tempdir):
    path = _zip(tmp_path / "crc.zip")
    _understate(path, "gsm8k-3/rows.jsonl")
    summary, _, folder = results.open_evaluation(path)
    assert folder is None and "rows.jsonl in the .zip is damaged" in summary.results_view
    assert not _unpacked(own_tempdir)  # the refused upload's unpacked part is removed


def test_a_damaged_trace_member_counts_as_missing_and_the_folder_opens(tmp_path):
    path = _zip(tmp_path / "crc-trace.zip")
    _understate(path, "gsm8k-3/traces/specem/1.json.gz")
    _, _, folder = results.open_evaluation(path)
    assert folder is not None and (1, "specem") not in folder.traced and len(folder.traced) == 8
    assert "Decisions per 100 tokens" in results.stats_view(folder).stats_view  # the statistics follow the grid


def test_a_corrupt_deflate_stream_inside_a_trace_counts_as_missing(tmp_path):
    good = (FIXTURE / "traces" / "specem" / "1.json.gz").read_bytes()
    bad = good[:20] + bytes(40) + good[60:]
    with pytest.raises(Exception):  # noqa: B017 - the file really is damaged (zlib.error)
        gzip.decompress(bad)
    _, _, folder = results.open_evaluation(_zip(tmp_path / "z.zip", {"traces/specem/1.json.gz": bad}))
    assert folder is not None and folder.readable_trace(1, "specem") is None
    assert "Decisions per 100 tokens" in results.stats_view(folder).stats_view  # the statistics follow the grid
    trace, note = results.open_cell(folder, {"qid": 1, "method": "specem"})
    assert trace is None and "not a readable gzip" in note and str(folder.path) not in note


@pytest.mark.parametrize("member", ["rows.jsonl", "meta.json"])
def test_deeply_nested_json_in_an_upload_is_one_sentence_without_the_servers_path(tmp_path, own_tempdir, member):
    content = b"[" * 100_000 + (b"\n" + (FIXTURE / "rows.jsonl").read_bytes() if member == "rows.jsonl" else b"")
    summary, _, folder = results.open_evaluation(_zip(tmp_path / "deep.zip", {member: content}))
    text = summary.results_view
    assert folder is None and member in text and results.UNPACKED_PREFIX not in text and str(own_tempdir) not in text
    assert not _unpacked(own_tempdir)


def test_unpacked_folders_go_when_replaced_and_when_their_session_is_dropped(tmp_path, own_tempdir):
    path = _zip(tmp_path / "ok.zip")
    store = Sessions(budget_bytes=10**9)
    first = results.open_evaluation(path)[2]
    store.get("a").evaluation = first
    assert first.unpacked.exists() and first.held_bytes > 0
    second = results.open_evaluation(path)[2]
    store.get("a").evaluation = second  # replaced: the first copy goes
    assert not first.unpacked.exists() and second.unpacked.exists()
    assert store.kept_bytes() == second.held_bytes  # counted in the sessions' budget
    store.close("a")  # the page closed
    assert not second.unpacked.exists() and not _unpacked(own_tempdir)


def test_an_open_evaluation_counts_in_the_session_budget(tmp_path, own_tempdir):
    path = _zip(tmp_path / "ok.zip")
    first = results.open_evaluation(path)[2]
    store = Sessions(budget_bytes=int(first.held_bytes * 1.5))
    store.get("a").evaluation = first
    store.get("b").evaluation = results.open_evaluation(path)[2]  # over budget: the older session goes
    assert store.kept_bytes() <= store.budget_bytes and not first.unpacked.exists()
    assert len(_unpacked(own_tempdir)) == 1


def test_explain_run_reads_a_question_number_sent_as_text():
    folder_qid = 23
    by_int = results.explain_run(folder_qid, "single:qwen,safe-unite")
    assert results.explain_run("23", "single:qwen,safe-unite") == by_int
    with pytest.raises(gr.Error, match="Question x"):
        results.explain_run("x", "single:qwen,safe-unite")


def test_explain_answers_reads_traces_through_the_time_limited_reader(monkeypatch):
    from ensemble.trace import read

    text = (ROOT / "assets" / "first-view.json").read_text(encoding="utf-8")
    assert results.explain_answers(text, json.loads(text))["divergence"] is None
    monkeypatch.setattr(read, "READ_LIMIT_S", -1.0)  # every reading is past its limit
    with pytest.raises(gr.Error, match="took more than"):
        results.explain_answers(text, text)
