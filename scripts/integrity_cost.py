"""What checking the model cache costs: the sampled digest every load uses, a full CRC-32 and a full sha256 of
every cached file, and a stat() of each file (what decides whether the full check must run).

    python scripts/integrity_cost.py [--repeat 3]

Prints seconds per model and in total (best of the repeats; the page cache is warm after the first read, as it
is for a load that follows a recent one).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ensemble import models
from ensemble.files import file_sha256
from ensemble.models.integrity import file_crc32, sample_digest


def best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    totals = {"stat": 0.0, "sampled": 0.0, "crc32": 0.0, "sha256": 0.0}
    size_total = 0
    for name in models.EMBEDDED:
        folder = models.prepare(name, models.quiet_progress)
        files = [p for p in sorted(folder.iterdir()) if p.is_file()]
        size = sum(p.stat().st_size for p in files)
        size_total += size
        row = {
            "stat": best(lambda files=files: [p.stat() for p in files], args.repeat),
            "sampled": best(lambda files=files: [sample_digest(p) for p in files], args.repeat),
            "crc32": best(lambda files=files: [file_crc32(p) for p in files], args.repeat),
            "sha256": best(lambda files=files: [file_sha256(p) for p in files], args.repeat),
        }
        for key, value in row.items():
            totals[key] += value
        print(f"{name:<8} {size / 1e9:5.2f} GB  " + "  ".join(f"{k} {v:8.4f} s" for k, v in row.items()))
    print(f"{'all':<8} {size_total / 1e9:5.2f} GB  " + "  ".join(f"{k} {v:8.4f} s" for k, v in totals.items()))


if __name__ == "__main__":
    main()
