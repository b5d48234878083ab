"""What does a llama.cpp pass of n new tokens cost against n passes of one? (Issue 15: why SAFE's verification is
not free on llama.cpp.)

For each embedded model on llama.cpp (this machine's cores as threads), reads a 150-token context, then times
12 passes each of 1, 2, 4, 6, 7, 8 and 10 new tokens, asking for every new position's row as SAFE's verifiers do.
On the 2-core AMD EPYC of docs/results.md a 6-token pass cost 3.5-4.6x a 1-token pass (qwen 99-112 ms against 28-30,
smollm2 37-51 against 10-11): the quantised kernels are compute-bound there, so a verifier's pass over a 5-token draft
costs nearly what decoding the 5 tokens would.

    python scripts/llama_pass_sizes.py [--models qwen,smollm2]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ensemble.members import new_runtime
from ensemble.models import load, quiet_progress

SIZES = (1, 2, 4, 6, 7, 8, 10)
REPEAT = 12


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="qwen,smollm2")
    args = parser.parse_args()
    print("model     " + "".join(f"{n:>3} tok  " for n in SIZES) + "  (ms per pass)")
    for name in args.models.split(","):
        model = new_runtime(load(name, "cpu", "auto", quiet_progress, runtime="llamacpp"))
        ids = list(range(1000, 1150))
        model.rows(ids, [len(ids) - 1])
        cells = []
        for n in SIZES:
            started = time.perf_counter()
            for i in range(REPEAT):
                new = [3000 + 100 * i + j for j in range(n)]
                model.rows(ids + new, list(range(len(ids), len(ids) + n)))
                ids += new
            cells.append((time.perf_counter() - started) / REPEAT * 1000)
        model.close()
        print(f"{name:9s} " + "".join(f"{c:7.1f}  " for c in cells))


if __name__ == "__main__":
    main()
