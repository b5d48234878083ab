"""Ctrl-C during llama.cpp's work (issue 39, item 10): a SIGINT handled while llama.cpp calls its Python log
callback used to be printed as "Exception ignored on calling ctypes callback function … KeyboardInterrupt" and
dropped, and ``evaluate`` went on. It now ends the program as soon as the C call returns."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from ensemble import models
from ensemble.models import cache
from tests.conftest import ROOT

pytestmark = [pytest.mark.llamacpp]

# The signal is raised at the exact moment llama.cpp enters the log callback (a profile hook on its first call),
# which is where a Ctrl-C mostly lands during a model load or a decode, so the test does not depend on timing.
SCRIPT = textwrap.dedent("""
    import signal, sys, time
    from ensemble.models import gguf

    gguf.lib()  # llama.cpp, its log silenced through the callback
    fired = []

    def hook(frame, event, arg):
        if event == "call" and frame.f_code is gguf._quiet.__code__ and not fired:
            fired.append(1)
            signal.raise_signal(signal.SIGINT)  # Ctrl-C, handled inside the callback

    sys.setprofile(hook)
    try:
        weights = gguf.GGUFWeights(sys.argv[1], "smollm2")  # its load logs through the callback
        sys.setprofile(None)
        time.sleep(5)  # the interrupt must have come by now
    except KeyboardInterrupt:
        sys.setprofile(None)
        print("interrupted", len(fired))
        sys.exit(3)
    print("went on", len(fired))
""")


def test_ctrl_c_inside_llama_cpps_log_callback_ends_the_program():
    from ensemble.models.runtimes import runtime_info

    if not runtime_info("llamacpp").available():
        pytest.skip("llama-cpp-python is not installed")
    folder = cache.gguf_cache(models.EMBEDDED["smollm2"])
    if not (folder / "model.gguf").exists():
        pytest.skip("smollm2's GGUF is not prepared (python -m ensemble prepare smollm2 --runtime llamacpp)")
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(folder / "model.gguf")], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert "Exception ignored" not in done.stderr, done.stderr[-800:]
    assert done.returncode == 3 and done.stdout.split() == ["interrupted", "1"], (done.stdout, done.stderr[-800:])


def test_the_guard_keeps_an_ordinary_ctrl_c_as_it_was():
    """Outside a callback the handler raises KeyboardInterrupt at once, like Python's own."""
    code = textwrap.dedent("""
        import signal, sys
        from ensemble.models import gguf
        gguf.guard_interrupts()
        assert signal.getsignal(signal.SIGINT) is gguf._on_interrupt
        try:
            signal.raise_signal(signal.SIGINT)
        except KeyboardInterrupt:
            print("interrupted")
    """)
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "interrupted", done.stderr[-800:]
