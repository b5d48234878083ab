"""Ours and lm-eval's numbers on the 20 questions of scripts/lm_eval/gsm8k-20.jsonl, side by side (docs/results.md).

For each method: the committed run's accuracy on these questions (``evaluate``'s extraction), lm-eval's two filters
applied to the same committed answers (the extraction alone differs), and, where ``make lm-eval`` has written its
samples, lm-eval's own scores through ``ensemble serve``.

    .venv/bin/python scripts/lm_eval/compare.py [eval-out/lm-eval]

Below the table, one line per question where the scores disagree or lm-eval's answer text is not the committed one:
the gold number, what each extraction read and whether it scored, and where the two texts first part.
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


def served_samples(out: Path, method: str) -> dict[int, dict[str, dict]]:
    """lm-eval's logged samples of the newest run for ``method``: qid -> filter name -> sample."""
    found = sorted((out / method).glob("**/samples_gsm8k_ensemble_lens_*.jsonl")) if out.exists() else []
    by_qid: dict[int, dict[str, dict]] = {}
    for line in (found[-1].open() if found else ()):
        sample = json.loads(line)
        by_qid.setdefault(sample["doc"]["qid"], {})[sample["filter"]] = sample
    return by_qid


def parting(ours: str, theirs: str) -> str:
    """Where two answer texts first differ, as a character offset, or 'same text'."""
    if ours == theirs:
        return "same text"
    at = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), min(len(ours), len(theirs)))
    return f"texts part at character {at} ({len(ours)} / {len(theirs)} characters)"


def disagreements(out: Path, rows: list[dict], qids: dict[int, dict]) -> None:
    """One line per question whose scores disagree between ours and lm-eval's, or whose texts differ."""
    print()
    print("| method | qid | gold | ours read (scored) | lm-eval strict read (scored) | flexible read (scored) | lm-eval's text vs ours |")
    print("|---|---:|---:|---|---|---|---|")
    agreed = []
    for method in METHODS:
        served = served_samples(out, method)
        agreed.append(f"{method}: {len(served)} questions through serve")
        for row in sorted((r for r in rows if r["method"] == method and r["qid"] in served), key=lambda r: r["qid"]):
            got = served[row["qid"]]
            text = got["strict-match"]["resps"][0][0]
            cells = [f"`{got[n]['filtered_resps'][0]}` ({got[n]['exact_match']:.0f})" for n in ("strict-match", "flexible-extract")]
            scores = {int(row["correct"]), *(int(got[n]["exact_match"]) for n in ("strict-match", "flexible-extract"))}
            if len(scores) > 1 or text != row["text"]:
                gold = normal(qids[row["qid"]]["answer"])
                print(f"| {method} | {row['qid']} | {gold} | `{row['prediction']}` ({int(row['correct'])}) | "
                      f"{cells[0]} | {cells[1]} | {parting(row['text'], text)} |")
    print()
    print("; ".join(agreed) + ". Each one not listed above agrees in text and in all three scores.")


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
    disagreements(out, rows, qids)


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "eval-out" / "lm-eval")
