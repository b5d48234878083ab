"""Behaviour-neutral check for speed work (issue 37): every method on the embedded models, on both runtimes, on a
few held-out GSM8K prompts, its trace saved with the timings stripped; ``--check`` runs them again and diffs.

Make the baseline on the code before a change, then check after it::

    python scripts/trace_baseline.py --save /tmp/traces-before      # on main
    python scripts/trace_baseline.py --check /tmp/traces-before     # on the branch

What a speed change may alter is left out of the comparison and printed beside it: the clock (as the golden
traces strip it) and the forward-pass counts (``forward_passes``, ``forward_tokens``, bytes): fewer passes or
tokens is the point of the change, not a change of behaviour. Everything else (every decision, number, round
record) must be equal.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ensemble.evaluation import GSM8K_TEST, build_prompt, load_questions, select_held_out
from ensemble.methods import generate
from ensemble.models import ModelPool, quiet_progress
from ensemble.settings import Settings
from tests.golden_runs import normalized

COSTS = ("forward_passes", "forward_tokens", "member_bytes", "member_row_bytes")
"""Stats a speed change is meant to move (printed, not compared)."""

DTYPES = {"transformers": "float32"}
"""float32 where the tests run it (the parity and golden checks); llama.cpp its GGUF as shipped."""

RUNS = {
    "single": (("qwen",), "single", {}),
    "unite": (("qwen", "smollm2"), "unite", {}),
    "gac": (("qwen", "smollm2"), "gac", {}),
    "safe_unite": (("qwen", "smollm2"), "safe", {"fusion": "unite"}),
    "safe_gac": (("qwen", "smollm2"), "safe", {"fusion": "gac"}),
    "safe_three": (("qwen", "smollm2", "gemma3"), "safe", {"fusion": "unite"}),
    "specem": (("qwen", "smollm2"), "specem", {}),
    "specem_three": (("qwen", "smollm2", "gemma3"), "specem", {}),
}


def held_out(count: int) -> list[str]:
    """GSM8K questions outside the 60 the project evaluates (bench's whole answers use the same)."""
    return [build_prompt(q.question) for q in select_held_out(load_questions(GSM8K_TEST), count)]


def run_all(runtimes: list[str], prompts: int, tokens: int, only: list[str] | None) -> dict[str, dict]:
    out = {}
    for runtime in runtimes:
        pool = ModelPool(dtype=DTYPES.get(runtime, "auto"), runtime=runtime)
        for name, (models, method, extra) in RUNS.items():
            if only and name not in only:
                continue
            loaded = [pool.get(m, quiet_progress) for m in models]
            for p, prompt in enumerate(held_out(prompts)):
                trace = generate(loaded, prompt, method, Settings(max_new_tokens=tokens, **extra))
                out[f"{runtime}/{name}/{p}"] = normalized(trace)
                print(f"{runtime}/{name}/{p}: {trace.stats.generated_tokens} tokens, passes {trace.stats.forward_passes}, "
                      f"{trace.stats.latency_s:.2f} s", flush=True)
    return out


def compared(data: dict) -> dict:
    return {**data, "stats": {k: v for k, v in data["stats"].items() if k not in COSTS}}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--save", help="folder to write the baseline into")
    where.add_argument("--check", help="folder of a baseline to compare with")
    p.add_argument("--runtimes", default="llamacpp,transformers")
    p.add_argument("--prompts", type=int, default=2)
    p.add_argument("--tokens", type=int, default=48)
    p.add_argument("--only", default="", help="comma list of runs (default all)")
    args = p.parse_args()
    only = [x for x in args.only.split(",") if x] or None
    traces = run_all(args.runtimes.split(","), args.prompts, args.tokens, only)
    if args.save:
        folder = Path(args.save)
        folder.mkdir(parents=True, exist_ok=True)
        for key, data in traces.items():
            (folder / (key.replace("/", "__") + ".json")).write_text(json.dumps(data, indent=1, sort_keys=True))
        print(f"saved {len(traces)} traces in {folder}")
        return 0
    bad = 0
    for key, data in traces.items():
        want = json.loads((Path(args.check) / (key.replace("/", "__") + ".json")).read_text())
        same = compared(data) == compared(want)
        bad += not same
        costs = {k: (want["stats"].get(k), data["stats"].get(k)) for k in ("forward_passes", "forward_tokens")}
        print(f"{'same' if same else 'DIFFERENT'} {key}: passes/tokens before -> after {costs}")
    print(f"{len(traces) - bad} of {len(traces)} traces identical (timings and pass counts aside)")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
