"""Why the engine computes in one thread (issue 37): OpenMP pools of other live threads throttle every pass.

Every thread that runs OpenMP work (a llama.cpp pass on two or more threads, a large torch op) keeps an OpenMP pool
while it lives; once the pools hold more threads than the machine has cores, libgomp's barriers sleep instead of
spinning, in every pool. Prints qwen's decoding step on llama.cpp (64 tokens of a GSM8K question, ms per token):

- ``main``: the model warmed (its first context made, the template head read) and runs advanced in the main
  thread, as the command line does;
- ``before``: warmed in the main thread at the start, runs advanced from a worker thread, as the app did (Gradio
  advances a streaming handler from its worker threads);
- ``homed``: warmed and advanced in the home thread (:mod:`ensemble.members.home`), as the app and ``ensemble
  serve`` do now.

Each way in a process of its own (the model loaded in its main thread), three runs.

    python scripts/omp_pools_probe.py
"""

from __future__ import annotations

import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ensemble.members.factory import forget_prompts, warm_runtime
from ensemble.members.home import homed, on_home
from ensemble.methods import EnsembleRun
from ensemble.models import ModelPool, quiet_progress
from ensemble.settings import Settings

PROMPT = ("Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. "
          "How many clips did Natalia sell altogether in April and May? Think step by step.")
TOKENS = 64


def measure(how: str) -> None:
    qwen = ModelPool(runtime="llamacpp").get("qwen", quiet_progress)
    threads = ThreadPoolExecutor(8)
    on_home(warm_runtime, qwen) if how == "homed" else warm_runtime(qwen)

    def run() -> float:
        forget_prompts(qwen)
        events = EnsembleRun([qwen], PROMPT, "single", Settings(max_new_tokens=TOKENS)).events()
        if how == "homed":
            events = homed(events)
        started = time.perf_counter()
        while True:
            try:
                threads.submit(next, events).result() if how != "main" else next(events)
            except StopIteration:
                break
        return (time.perf_counter() - started) / TOKENS * 1000

    print(f"{how:>8}: " + "  ".join(f"{run():5.1f}" for _ in range(3)) + "  ms/token", flush=True)


def main() -> None:
    if len(sys.argv) > 1:
        measure(sys.argv[1])
        return
    for how in ("main", "before", "homed"):
        subprocess.run([sys.executable, __file__, how], check=True)


if __name__ == "__main__":
    main()
