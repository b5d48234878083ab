"""Do llama.cpp members compute at the same time in threads of one process? (issue 17, item 4)

    python scripts/llama_threads_probe.py [--tokens 128]

Two members (qwen and gemma3, llama.cpp runtime) each decode ``--tokens`` tokens after a GSM8K question of the
test set (ensemble/data/gsm8k, as ``bench`` asks it), greedily:
one after the other, then at the same time in two Python threads, for 1 and 2 threads per context. If the C
calls held the GIL, the two-thread run would take as long as the sequential one; if they release it, it takes
about as long as the slower member alone (on enough cores). Prints seconds and the overlap ratio.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

def decode(model, prompt: str, tokens: int, threads: int) -> float:
    from ensemble.members import RunPolicy, new_runtime

    runtime = new_runtime(model)
    runtime.configure(RunPolicy(threads=threads))
    ids = model.prompt_ids(prompt)
    runtime.rows(ids, [len(ids) - 1])
    started = time.perf_counter()
    for _ in range(tokens):
        logits = runtime.rows(ids, [len(ids) - 1])[-1]
        ids = ids + [int(logits.argmax())]
    runtime.close()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=128)
    args = parser.parse_args()
    from ensemble.bench.measure import reasoning_prompts
    from ensemble.models import ModelPool, quiet_progress

    prompt = reasoning_prompts(None, 1, 0)[1][0]

    pool = ModelPool(runtime="llamacpp")
    members = pool.get_many(["qwen", "gemma3"], quiet_progress)
    decode(members[0], prompt, 4, 1)  # warm the pages of the memory-mapped files
    decode(members[1], prompt, 4, 1)
    for threads in (1, 2):
        alone = [decode(m, prompt, args.tokens, threads) for m in members]
        def job(i: int, threads: int = threads) -> None:
            decode(members[i], prompt, args.tokens, threads)

        workers = [threading.Thread(target=job, args=(i,)) for i in range(2)]
        started = time.perf_counter()
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        together = time.perf_counter() - started
        print(
            f"{threads} thread(s) per member: one after the other {sum(alone):.2f} s (qwen {alone[0]:.2f}, gemma3 "
            f"{alone[1]:.2f}); at the same time in two Python threads {together:.2f} s "
            f"= {together / sum(alone):.2f} of sequential, {together / max(alone):.2f} of the slower one alone"
        )


if __name__ == "__main__":
    main()
