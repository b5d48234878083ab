"""The visual package as a whole: it imports no model code."""

from __future__ import annotations

import re
import subprocess
import sys

from tests.conftest import ROOT


def test_visual_imports_no_model_code():
    for path in (ROOT / "visual").glob("*.py"):
        for line in path.read_text(encoding="utf-8").splitlines():
            if re.match(r"\s*(from|import)\s+(ensemble|torch|transformers|gradio)\b", line):
                # the trace, key tables, readable text, the methods' declared capabilities, the error types and the atomic
                # file writer (report pages never go through a symbolic link): all torch-free
                assert re.match(r"\s*from ensemble\.(trace|trace\.readable|tokens\.key_table|capabilities|errors|files) import ", line), f"{path.name}: {line}"
    code = "import sys, visual; bad = [m for m in ('torch', 'transformers', 'gradio') if m in sys.modules]; assert not bad, bad"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": ""})
