"""Which questions lm-eval's cache already answers for a model, as lm-eval's ``--samples`` JSON.

``make lm-eval`` caches each answer as it comes, but lm-eval writes its samples and scores only when a model's
20 answers are all in. To score the answers a long run has so far (docs/results.md):

    LMEVAL_SAMPLES=$(.venv-lmeval/bin/python scripts/lm_eval/cached.py single:qwen) scripts/lm_eval/run.sh single:qwen

Run it with .venv-lmeval's Python (lm-eval's cache is a ``sqlitedict`` file). The key is lm-eval's own: the sha256 of
``["generate_until", prompt, generation_kwargs]``, the prompt and settings taken from the task's YAML.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import yaml
from sqlitedict import SqliteDict

HERE = Path(__file__).resolve().parent


def cached_indices(model: str, out: Path) -> list[int]:
    """Positions in gsm8k-20.jsonl whose answer is in ``out/cache/MODEL_rank0.db``."""
    task = yaml.safe_load((HERE / "gsm8k_ensemble_lens.yaml").read_text())
    template, settings = task["doc_to_text"], task["generation_kwargs"]
    db = out / "cache" / f"{model}_rank0.db"
    keys = set(SqliteDict(str(db), flag="r").keys()) if db.exists() else set()
    found = []
    for index, line in enumerate((HERE / "gsm8k-20.jsonl").open()):
        question = json.loads(line)["question"].strip()
        prompt = template.replace("{{question.strip()}}", question)  # the task's one Jinja expression
        key = hashlib.sha256(json.dumps(["generate_until", prompt, settings]).encode("utf-8")).hexdigest()
        if key in keys:
            found.append(index)
    return found


if __name__ == "__main__":
    out = Path(sys.argv[2]) if len(sys.argv) > 2 else HERE.parents[1] / "eval-out" / "lm-eval"
    print(json.dumps({"gsm8k_ensemble_lens": cached_indices(sys.argv[1], out)}))
