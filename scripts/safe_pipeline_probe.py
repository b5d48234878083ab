"""Would SAFE get faster by verifying on a second thread while the drafter drafts? (Issue 3 probe.)

Runs 8 rounds of "qwen drafts 5 tokens, smollm2 and gemma3 verify the text" three ways on the embedded models:
the drafter alone, sequentially (what SAFE does, 2 torch threads), and pipelined (verification of round r on a
worker thread while the drafter drafts round r + 1, 1 torch thread each). Prints seconds per schedule; compare
ratios within one run. On the idle 2-core CPU of docs/results.md: drafter alone 3.18 s, sequential 4.06 s,
pipelined 5.78 s: the Python side of each forward pass holds the GIL and one torch thread per model is slower,
so SAFE keeps the sequential schedule.

    python scripts/safe_pipeline_probe.py
"""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ensemble.bench.measure import PROMPTS
from ensemble.methods.member import ModelAdapter
from ensemble.models import load, quiet_progress

ROUNDS, LOOKAHEAD = 8, 5


def greedy(logits: torch.Tensor) -> int:
    return int(torch.argmax(logits))


def main() -> None:
    models = {n: load(n, progress=quiet_progress) for n in ("qwen", "smollm2", "gemma3")}

    def fresh() -> dict[str, ModelAdapter]:
        adapters = {n: ModelAdapter(m) for n, m in models.items()}
        for a in adapters.values():
            a.start(PROMPTS[0])
        return adapters

    def verify(adapters: dict[str, ModelAdapter], text: str) -> None:
        for name in ("smollm2", "gemma3"):
            v = adapters[name]
            v.sync(text)
            v.distributions_from(max(0, len(text) - 25))

    def alone() -> float:
        torch.set_num_threads(2)
        q = fresh()["qwen"]
        t = time.perf_counter()
        for _ in range(ROUNDS):
            q.draft(LOOKAHEAD, greedy)
        return time.perf_counter() - t

    def sequential() -> float:
        torch.set_num_threads(2)
        adapters = fresh()
        q = adapters["qwen"]
        t = time.perf_counter()
        for _ in range(ROUNDS):
            q.draft(LOOKAHEAD, greedy)
            verify(adapters, q.text)
        return time.perf_counter() - t

    def pipelined() -> float:
        adapters = fresh()
        q = adapters["qwen"]
        torch.set_num_threads(1)
        t = time.perf_counter()
        previous = None
        for _ in range(ROUNDS):
            worker = None
            if previous is not None:
                def job(text: str = previous) -> None:
                    torch.set_num_threads(1)
                    verify(adapters, text)

                worker = threading.Thread(target=job)
                worker.start()
            q.draft(LOOKAHEAD, greedy)
            if worker is not None:
                worker.join()
            previous = q.text
        verify(adapters, previous)
        return time.perf_counter() - t

    alone()  # warm-up
    for name, schedule in (("drafter alone", alone), ("sequential", sequential), ("pipelined", pipelined)):
        print(f"{name:14s} {schedule():.2f} s", flush=True)


if __name__ == "__main__":
    main()
