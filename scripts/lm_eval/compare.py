"""Ours and lm-eval's numbers on the 20 questions of scripts/lm_eval/gsm8k-20.jsonl, side by side (docs/results.md).

For each method: the committed run's accuracy on these questions (``evaluate``'s extraction), lm-eval's two filters
applied to the same committed answers (the extraction alone differs), and, where ``make lm-eval`` has written its
samples, lm-eval's own scores through ``ensemble serve``.

    .venv/bin/python scripts/lm_eval/compare.py [eval-out/lm-eval]
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = ROOT / "docs" / "results" / "gsm8k-60-traced" / "rows.jsonl"
METHODS = ("single:qwen", "safe-unite@qwen+smollm2")
STRICT = re.compile(r"The answer is \$?(\-?[0-9\.\,]+)")
FLEXIBLE = re.compile(r"(-?[$0-9.,]{2,})|(-?[0-9]+)")
IGNORE = (",", "\\$", "(?s).*#### ", "\\.$")


def normal(text: str) -> str:
    """lm-eval's exact_match with the task's regexes_to_ignore and ignore_case."""
    for pattern in IGNORE:
        text = re.sub(pattern, "", text)
    return text.lower().strip()


def strict(text: str) -> str:
    found = STRICT.findall(text)
    return found[0] if found else "[invalid]"


def flexible(text: str) -> str:
    found = FLEXIBLE.findall(text)
    if not found:
        return "[invalid]"
    last = found[-1]
    return next(g for g in last if g)


def main(out: Path) -> None:
    data = [json.loads(line) for line in (ROOT / "scripts" / "lm_eval" / "gsm8k-20.jsonl").open()]
    qids = {d["qid"]: d for d in data}
    rows = [json.loads(line) for line in COMMITTED.open()]
    print("| method | ours (evaluate) | lm-eval strict on our answers | lm-eval flexible on our answers | lm-eval via serve: strict | flexible |")
    print("|---|---:|---:|---:|---:|---:|")
    for method in METHODS:
        mine = [r for r in rows if r["method"] == method and r["qid"] in qids]
        gold = {q: normal(d["answer"]) for q, d in qids.items()}
        ours = sum(r["correct"] for r in mine)
        s = sum(normal(strict(r["text"])) == gold[r["qid"]] for r in mine)
        f = sum(normal(flexible(r["text"])) == gold[r["qid"]] for r in mine)
        served = ["not run", "not run"]
        samples = sorted((out / method).glob("**/samples_gsm8k_ensemble_lens_*.jsonl")) if out.exists() else []
        if samples:
            got = [json.loads(line) for line in samples[-1].open()]
            served = [f"{sum(g['exact_match'] for g in got if g['filter'] == name):.0f}/{sum(g['filter'] == name for g in got)}"
                      for name in ("strict-match", "flexible-extract")]
        print(f"| {method} | {ours}/{len(mine)} | {s}/{len(mine)} | {f}/{len(mine)} | {served[0]} | {served[1]} |")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "eval-out" / "lm-eval")
