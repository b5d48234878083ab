"""How should llama.cpp's OpenMP threads wait in member processes that share one machine? (Issue 15 probe.)

For each wait policy, a fresh Python process starts the Ray backend (one actor per model, threads by role) and
times, on one GSM8K question of the test set (ensemble/data/gsm8k) with evaluate's instruction, 128 greedy tokens of: qwen alone,
SAFE on qwen + smollm2 and every-token UniTE on them, each after a short warm-up run. ``default`` is OpenMP's own
policy (threads spin a while at every barrier, then sleep), ``passive`` sleeps at once (what
``ensemble.members.ray.backend.SHARED_CORES_ENV`` gives members on one machine). Compare the rows of one run.

    python scripts/omp_wait_probe.py            # both policies
    python scripts/omp_wait_probe.py --question 120
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "ensemble" / "data" / "gsm8k" / "test.jsonl"
POLICIES = {"default": "", "passive": "PASSIVE"}  # an empty OMP_WAIT_POLICY is the user's "leave it": OpenMP's default


def child(question: int, tokens: int) -> dict:
    sys.path.insert(0, str(ROOT))
    from ensemble import Settings, generate
    from ensemble.evaluation import build_prompt
    from ensemble.members import make_backend
    from ensemble.models import ModelPool

    line = DATA.read_text(encoding="utf-8").splitlines()[question]
    prompt = build_prompt(json.loads(line)["question"])
    backend = make_backend("ray")
    try:
        models = ModelPool(runtime="llamacpp", weights=False).get_many(["qwen", "smollm2"])
        backend.prepare(models)
        out = {}
        for method, members in (("single", models[:1]), ("safe", models), ("unite", models)):
            generate(members, prompt, method, Settings(max_new_tokens=8, stop_strings=[]), backend=backend)
            started = time.perf_counter()
            trace = generate(members, prompt, method, Settings(max_new_tokens=tokens, stop_strings=[]), backend=backend)
            out[method] = (time.perf_counter() - started) / max(1, len(trace.tokens))
        return out
    finally:
        backend.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--question", type=int, default=120, help="line of the GSM8K test file")
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.question, args.tokens)))
        return
    print("policy    qwen alone  SAFE      UniTE     (s per token on Ray members; SAFE / qwen alone)")
    for name, value in POLICIES.items():
        env = {**os.environ, "OMP_WAIT_POLICY": value}
        done = subprocess.run([sys.executable, __file__, "--child", "--question", str(args.question), "--tokens",
                               str(args.tokens)], env=env, capture_output=True, text=True, check=True)
        row = json.loads(done.stdout.strip().splitlines()[-1])
        print(f"{name:9s} {row['single']:.4f}      {row['safe']:.4f}    {row['unite']:.4f}    "
              f"({row['safe'] / row['single']:.2f}x)")


if __name__ == "__main__":
    main()
