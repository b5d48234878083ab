"""``generate`` on a terminal shows SAFE's drafts faint while they are checked and erases them for the verified text;
to a pipe it prints the verified text alone (issue 37, Deliver 4)."""

from __future__ import annotations

import json
import os
import pty
import re
import subprocess
import sys

import pytest

from ensemble.cli.generate import DIM, DraftLine
from ensemble.methods import DraftEvent
from tests.conftest import ROOT


def draft(text: str, start: int, end: int, index: int = 0) -> DraftEvent:
    return DraftEvent(0, index, "qwen", text[start:end], start, end, text)


def test_draft_line_shows_what_fits_and_erases_it():
    line = DraftLine(20)
    line.printed("The answer")
    assert line.show(draft("The answer is", 10, 13)) == DIM + " is\x1b[0m"
    assert line.show(draft("The answer is 5", 13, 15, 1)) == DIM + " 5\x1b[0m"
    assert line.erase() == "\x1b[5D\x1b[K" and line.erase() == ""  # five cells back, then the rest of the line cleared
    assert line.show(draft("The answer is\nso", 10, 16)) == ""  # a line break: not shown, nor the rest of the round
    assert line.show(draft("The answer is\nso it", 16, 19, 1)) == ""
    line.erase()
    assert line.show(draft("The answer is 123456789", 10, 23)) == ""  # would wrap at 20 columns
    line.printed(" is\nx")
    assert line.column == 1 and line.show(draft("x 東京", 1, 4)) == DIM + " 東京\x1b[0m" and line.erase() == "\x1b[5D\x1b[K"


def screen(raw: str) -> str:
    """What a terminal shows after ``raw``: text, cursor moves back (``ESC[nD``) and clears to the end of the line."""
    lines, col, pos = [""], 0, 0
    pattern = re.compile(r"\x1b\[(\d*)D|\x1b\[K|\x1b\[[0-9;]*m|\r?\n|.", re.S)
    for m in pattern.finditer(raw):
        tok = m.group()
        pos = m.end()
        if tok.endswith("D") and tok.startswith("\x1b["):
            col = max(0, col - int(m.group(1) or 1))
        elif tok == "\x1b[K":
            lines[-1] = lines[-1][:col]
        elif tok.startswith("\x1b["):
            continue
        elif tok in ("\n", "\r\n"):
            lines.append("")
            col = 0
        else:
            cur = lines[-1]
            lines[-1] = cur[:col] + tok + cur[col + 1 :]
            col += 1
    assert pos == len(raw)
    return "\n".join(lines)


def run_on_terminal(args: list[str]) -> str:
    main, child = pty.openpty()
    env = {k: v for k, v in os.environ.items() if k != "NO_COLOR"} | {"COLUMNS": "400"}
    proc = subprocess.Popen([sys.executable, "-m", "ensemble", *args], cwd=ROOT, stdout=child, stderr=subprocess.PIPE, env=env)
    os.close(child)
    out = b""
    while True:
        try:
            chunk = os.read(main, 65536)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    proc.wait(timeout=600)
    os.close(main)
    assert proc.returncode == 0, proc.stderr.read().decode()
    return out.decode()


@pytest.mark.embedded
@pytest.mark.slow
def test_generate_shows_drafts_on_a_terminal_and_final_text_to_a_pipe(tmp_path):
    args = ["generate", "--method", "safe", "--models", "qwen,smollm2", "--max-new-tokens", "24",
            "--prompt", "Name three colours of the rainbow."]
    raw = run_on_terminal([*args, "--out", str(tmp_path / "tty.json")])
    text = json.loads((tmp_path / "tty.json").read_text())["text"]
    assert DIM in raw and "D\x1b[K" in raw  # drafts were printed faint, then erased
    assert screen(raw.replace("\r\n", "\n")).rstrip("\n") == text.replace("\r\n", "\n")  # what stays is the verified text
    piped = subprocess.run([sys.executable, "-m", "ensemble", *args, "--out", str(tmp_path / "pipe.json")], cwd=ROOT,
                           capture_output=True, text=True, timeout=600)
    assert piped.returncode == 0, piped.stderr
    assert "\x1b" not in piped.stdout and piped.stdout.rstrip("\n") == json.loads((tmp_path / "pipe.json").read_text())["text"]
