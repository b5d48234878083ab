"""Does another draft length n bring SAFE nearer qwen alone's speed? (Issue 37: "the lookahead adapted to what rounds
keep".) SAFE-UniTE and SAFE-GaC on the default ensemble with n = 3, 4, 5, 6, 8 on held-out GSM8K questions (128 new
tokens, prompt read included, each run as a new question's), against qwen alone on the same prompts; prints each
one's ratio, its discarded draft tokens, and whether its text equals n = 5's.

    python scripts/lookahead_sweep.py [--runtime llamacpp|transformers] [--limit 2]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ensemble.bench.whole import _run
from ensemble.evaluation import GSM8K_TEST, build_prompt, load_questions, select_held_out
from ensemble.models import DEFAULT_ENSEMBLE, ModelPool, quiet_progress

LENGTHS = (3, 4, 5, 6, 8)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runtime", default="llamacpp")
    parser.add_argument("--limit", type=int, default=2)
    args = parser.parse_args()
    pool = ModelPool(runtime=args.runtime)
    members = [pool.get(name, quiet_progress) for name in DEFAULT_ENSEMBLE]
    prompts = [build_prompt(q.question) for q in select_held_out(load_questions(GSM8K_TEST), args.limit)]
    plan = [("alone", None, 0)] + [(f"{fusion}-{n}", fusion, n) for fusion in ("unite", "gac") for n in LENGTHS]
    runs: dict[str, list] = {}
    for prompt in prompts:  # interleaved: every entry on one prompt, then the next prompt
        for label, fusion, n in plan:
            if fusion is None:
                elapsed, trace, _ = _run(members[:1], prompt, "single", {"max_new_tokens": 128})
            else:
                elapsed, trace, _ = _run(members, prompt, "safe", {"max_new_tokens": 128, "lookahead": n, "fusion": fusion})
            runs.setdefault(label, []).append((elapsed, trace))
    def per_token(label: str) -> float:
        return sum(e for e, _ in runs[label]) / sum(t.stats.generated_tokens for _, t in runs[label])

    alone = per_token("alone")
    for label, fusion, _ in plan[1:]:
        same = [t.text == five.text for (_, t), (_, five) in zip(runs[label], runs[f"{fusion}-5"], strict=True)]
        discarded = sum(t.stats.draft_discarded for _, t in runs[label])
        print(f"{args.runtime} SAFE-{label:8s} {per_token(label) / alone:5.2f}x qwen alone  discarded {discarded:3d}  "
              f"text as n=5: {sum(same)}/{len(same)}")


if __name__ == "__main__":
    main()
