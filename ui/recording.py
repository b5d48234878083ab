"""The recorded first view's promise: timings a visitor may read as this app's, or none.

The app opens on a recorded run (``assets/first-view.json``, written by ``scripts/record_first_view.py``). Its
latency, tokens/s and first-token time are shown to every visitor, labelled as recorded; a recording made while
the machine was busy with something else (a test suite, another run) would still show absurd figures, such as 435 s
for a 16-token answer that takes 3 s here. :func:`implausible_timings` says why a trace's timings cannot be those of
the embedded models on a two-core CPU with nothing else running; the recorder refuses to write such a trace and
``tests/ui/test_first_view.py`` fails on a shipped one.

The ceilings are ten or more times what an idle two-core machine measures (see :data:`MAX_S_PER_TOKEN`), so they
catch a recording slowed by load, never an honest one on a slower CPU.
"""

from __future__ import annotations

from ensemble.trace import RunTrace

MAX_S_PER_TOKEN = 2.0
"""Most seconds of the whole run per generated token. The first example (SAFE on the three embedded models, 16
tokens) took 0.19 s per token on llama.cpp on two idle cores (3.0 s) and about 0.5 s on transformers; the shipped
recording of 2 Dec 2026, made while test suites shared the cores, said 27 s."""

MAX_S_PER_PROCESSED_TOKEN = 1.0
"""Most seconds a model spends per token its forward passes read (``forward_s / forward_tokens``). The embedded
models have at most 0.5 B parameters: on two idle cores a forward pass reads a token in 2-30 ms on llama.cpp and at
most about 0.15 s on transformers; the loaded recording said 3.6 s (qwen, 260 s for 72 tokens)."""


def implausible_timings(trace: RunTrace) -> list[str]:
    """Why the timings of ``trace`` cannot be a run of the embedded models on an idle two-core CPU ([] when they
    can): each reason one plain sentence."""
    s, reasons = trace.stats, []
    tokens = max(1, int(s.generated_tokens or 0))
    latency = float(s.latency_s or 0.0)
    if latency / tokens > MAX_S_PER_TOKEN:
        reasons.append(f"{latency:.1f} s for {tokens} tokens is {latency / tokens:.1f} s per token, more than the "
                       f"{MAX_S_PER_TOKEN:g} s an idle two-core CPU ever takes: the machine was busy")
    first = s.first_token_s
    if first is not None and (first < 0 or first > latency + 1e-6):
        reasons.append(f"the first token came after {first:.1f} s, outside the run's {latency:.1f} s")
    for model, seconds in sorted((s.forward_s or {}).items()):
        read = (s.forward_tokens or {}).get(model, 0)
        if read and seconds / read > MAX_S_PER_PROCESSED_TOKEN:
            reasons.append(f"{model} spent {seconds / read:.2f} s per token it read ({seconds:.1f} s for {read}), more "
                           f"than {MAX_S_PER_PROCESSED_TOKEN:g} s: the machine was busy")
    return reasons
