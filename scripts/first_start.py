"""What a first ``make demo`` costs on each runtime: preparing the embedded models in an empty cache, then loading
them as the app does, measured side by side (issue 17, item 2).

    python scripts/first_start.py [--runtimes transformers,llamacpp] [--keep]

For each runtime, in a fresh cache folder: ``python -m ensemble prepare --runtime R`` (time, peak memory, the
cache's size on disk), then a new process that loads the three models on that runtime and runs one 16-token
SAFE answer (load time, resident memory after the load and after the run). Each step is its own process, so
one runtime's memory never counts for the other.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]

LOAD = """
import json, time, psutil
from ensemble.models import ModelPool, DEFAULT_MODELS, quiet_progress
from ensemble.methods import generate
from ensemble.settings import Settings
t = time.perf_counter()
pool = ModelPool(runtime={runtime!r})
members = pool.get_many(list(DEFAULT_MODELS), quiet_progress)
load_s = time.perf_counter() - t
rss_loaded = psutil.Process().memory_info().rss
trace = generate(members, "Janet has 16 eggs and eats 3. How many are left?", "safe", Settings(max_new_tokens=16))
print(json.dumps({{"load_s": round(load_s, 2), "rss_loaded_mb": round(rss_loaded / 2**20),
                   "rss_after_run_mb": round(psutil.Process().memory_info().rss / 2**20), "tokens": trace.stats.generated_tokens}}))
"""


def run_measured(cmd: list[str], env: dict) -> tuple[float, int, str]:
    """Wall seconds, peak resident memory (bytes, the process and its children) and stdout of ``cmd``."""
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    peak = 0
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        ps = psutil.Process(proc.pid)
        while not done.wait(0.05):
            try:
                rss = ps.memory_info().rss + sum(c.memory_info().rss for c in ps.children(recursive=True))
            except psutil.Error:
                continue
            peak = max(peak, rss)

    watcher = threading.Thread(target=sample, daemon=True)
    watcher.start()
    out, _ = proc.communicate()
    done.set()
    watcher.join()
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed with exit code {proc.returncode}")
    return time.perf_counter() - started, peak, out


def folder_mb(folder: Path) -> int:
    return round(sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) / 2**20)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runtimes", default="transformers,llamacpp")
    parser.add_argument("--keep", action="store_true", help="keep the temporary cache folders")
    args = parser.parse_args()
    rows = {}
    for runtime in [r.strip() for r in args.runtimes.split(",") if r.strip()]:
        cache = Path(tempfile.mkdtemp(prefix=f"first-start-{runtime}-"))
        env = {**os.environ, "ENSEMBLE_LENS_CACHE": str(cache), "PYTHONPATH": str(ROOT)}
        prep_s, prep_peak, _ = run_measured([sys.executable, "-m", "ensemble", "prepare", "--runtime", runtime], env)
        load_s, load_peak, out = run_measured([sys.executable, "-c", LOAD.format(runtime=runtime)], env)
        rows[runtime] = {
            "prepare_s": round(prep_s, 1),
            "prepare_peak_mb": round(prep_peak / 2**20),
            "cache_mb": folder_mb(cache),
            "load_process_s": round(load_s, 1),
            "load_peak_mb": round(load_peak / 2**20),
            **json.loads(out.strip().splitlines()[-1]),
        }
        print(f"{runtime}: {rows[runtime]}", file=sys.stderr, flush=True)
        if not args.keep:
            subprocess.run(["rm", "-rf", str(cache)], check=False)
    print(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
