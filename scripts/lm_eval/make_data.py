"""Write scripts/lm_eval/gsm8k-20.jsonl: the 20 questions ``evaluate --limit 20 --seed 0`` picks from the shipped
GSM8K test set (the first 20 of docs/results/gsm8k-60-traced's 60), for lm-eval's task beside it.

    .venv/bin/python scripts/lm_eval/make_data.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from ensemble.evaluation import GSM8K_TEST, load_questions, select_questions

OUT = Path(__file__).resolve().parent / "gsm8k-20.jsonl"
LIMIT, SEED = 20, 0


def rows() -> list[dict]:
    """The chosen questions as GSM8K's own lines (``question``, ``answer`` with its worked solution) and their ``qid``."""
    lines = [line for line in GSM8K_TEST.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [{"qid": q.qid, **json.loads(lines[q.qid])} for q in select_questions(load_questions(GSM8K_TEST), LIMIT, SEED)]


if __name__ == "__main__":
    OUT.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows()), encoding="utf-8")
    print(f"wrote {OUT}")
