"""How likely does Gemma find a natural first token after its plain template? (Issue 14, item 2.)

For the farmer question and the first 5 GSM8K test questions (with evaluate's instruction), prints Gemma 3's
probability of the openings "To", "Let", "1", "First" and " " and its top 3 next tokens, after the old
template ("...\\nAnswer:") and the current one ("...\\nAnswer:\\n"). Figures in docs/results.md.

    python scripts/junction_probe.py [path/to/gsm8k.jsonl]
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ensemble.evaluation import GSM8K_TEST, INSTRUCTION, load_questions
from ensemble.models import ModelPool, quiet_progress

FARMER = "A farmer has 17 sheep. All but 9 run away. Then he buys 4 more. How many sheep does he have now? Think step by step."
TEMPLATES = {"old": "Question: {prompt}\nAnswer:", "new": "Question: {prompt}\nAnswer:\n"}
OPENINGS = ["To", "Let", "1", "First", " "]


def main() -> None:
    data = sys.argv[1] if len(sys.argv) > 1 else str(GSM8K_TEST)
    gemma = ModelPool(dtype="float32", runtime="transformers").get("gemma3", quiet_progress)
    tok = gemma.tokenizer
    prompts = [FARMER] + [f"{q.question}\n{INSTRUCTION}" for q in load_questions(data)[:5]]
    for label, template in TEMPLATES.items():
        print(f"{label} template {template!r}")
        for prompt in prompts:
            ids = tok(template.format(prompt=prompt), add_special_tokens=True)["input_ids"]
            with torch.inference_mode():
                probs = torch.softmax(gemma.model(input_ids=torch.tensor([ids])).logits[0, -1].float(), -1)
            shown = {o: round(float(probs[tok(o, add_special_tokens=False)["input_ids"][0]]), 4) for o in OPENINGS}
            top = torch.topk(probs, 3)
            best = [(tok.decode([i]), round(float(v), 3)) for v, i in zip(top.values.tolist(), top.indices.tolist(), strict=True)]
            print(f"  {shown}  top {best}")


if __name__ == "__main__":
    main()
