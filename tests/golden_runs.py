"""Golden runs of every method on the tiny models (tests/conftest.py), with their timings stripped.

``tests/ensemble/methods/test_golden_traces.py`` compares each run with its file in ``tests/fixtures/golden/``; after a change that
means to alter what a method decides, rewrite them with ``python tests/fixtures/make_fixtures.py --golden`` and
say why in the commit.
"""

from __future__ import annotations

import json

from ensemble.methods import generate
from ensemble.settings import Settings
from ensemble.trace import RunTrace

PROMPT = "Natalia sold clips to 48 of her friends in April. How many clips did she sell?"
THREE = ("qwen", "smollm2", "gemma3")

RUNS: dict[str, tuple[tuple[str, ...], str, dict]] = {
    "single": (("qwen",), "single", {"max_new_tokens": 16}),
    "unite": (THREE, "unite", {"max_new_tokens": 16}),
    "gac": (THREE, "gac", {"max_new_tokens": 16, "gac_gate": 0.5}),
    "safe": (("smollm2", "gemma3", "qwen"), "safe", {"max_new_tokens": 24, "lookahead": 4}),
    "safe_gac_sampled": (THREE, "safe", {"max_new_tokens": 16, "fusion": "gac", "temperature": 0.7, "seed": 3}),
    "specem": (THREE, "specem", {"max_new_tokens": 16}),
    "specem_sampled": (THREE, "specem", {"max_new_tokens": 16, "sample_drafts": True, "seed": 5}),
}
"""name -> (tiny models, method, settings); every run has ``stop_strings=[]`` so it goes to its budget."""

TIMINGS = ("latency_s", "first_token_s", "tokens_per_s", "forward_s", "fusion_ms_mean")


def normalized(trace: RunTrace) -> dict:
    """The trace as JSON data without what depends on the clock (when it ran, how long anything took)."""
    data = json.loads(trace.to_json())
    data.pop("created", None)
    for key in TIMINGS:
        data["stats"].pop(key, None)
    for record in data["tokens"]:
        if record.get("fusion"):
            record["fusion"].pop("ms", None)
    for record in data["rounds"]:
        record.pop("timings", None)
    return data


def golden_run(tiny: dict, name: str) -> dict:
    names, method, settings = RUNS[name]
    trace = generate([tiny[n] for n in names], PROMPT, method, Settings(stop_strings=[], **settings))
    return normalized(trace)


def dumps(data: dict) -> str:
    return json.dumps(data, indent=1, ensure_ascii=False, sort_keys=True) + "\n"
