"""evaluate's per-method members and weights (issue 14 item 4's table in one command) and SAFE's drafting
figures in the summary."""

from __future__ import annotations

import pytest

from ensemble.evaluation import EvalConfig, EvaluationError, parse_methods, summarize
from ensemble.settings import Settings

ITEM4 = ("single:qwen,safe-unite,safe-unite@qwen=2+smollm2+gemma3,safe-unite@qwen+gemma3,safe-unite@qwen=2+gemma3,"
         "safe-unite@qwen+smollm2,safe-unite@qwen=2+smollm2,safe-gac@qwen=2+gemma3")


def test_methods_name_their_own_members_and_weights(tmp_path):
    specs = parse_methods(ITEM4)
    assert [s.label for s in specs][:3] == ["single:qwen", "safe-unite", "safe-unite@qwen=2+smollm2+gemma3"]
    ensemble = ["qwen", "smollm2", "gemma3"]
    assert specs[1].model_names(ensemble) == ensemble
    assert specs[3].model_names(ensemble) == ["qwen", "gemma3"] and specs[3].settings(Settings()).weights == {}
    weighted = specs[4].settings(Settings(weights={"smollm2": 3.0}))
    assert weighted.weights == {"qwen": 2.0} and weighted.fusion == "unite"
    assert specs[7].method == "safe" and specs[7].settings(Settings()).fusion == "gac"
    config = EvalConfig(data=tmp_path / "q.jsonl", methods=specs, models=ensemble, settings=Settings(max_new_tokens=8),
                        out=tmp_path / "out").validate()
    assert config.model_names() == ensemble
    alone = EvalConfig(data=tmp_path / "q.jsonl", methods=parse_methods("safe-unite@qwen+gemma3"), models=[],
                       settings=Settings(), out=tmp_path / "o").validate()
    assert alone.model_names() == ["qwen", "gemma3"]


@pytest.mark.parametrize(
    ("methods", "message"),
    [
        ("safe-unite@qwen=x+gemma3", "must be a number"),
        ("safe-unite@qwen++gemma3", "empty model name"),
        ("safe-unite@qwen=0+gemma3=0", "sum to 0"),
        ("safe-unite@qwen+qwen", "listed twice"),
    ],
)
def test_bad_members_are_explained(tmp_path, methods, message):
    with pytest.raises(EvaluationError, match=message):
        EvalConfig(data=tmp_path / "q.jsonl", methods=parse_methods(methods), models=["qwen", "gemma3"],
                   settings=Settings(), out=tmp_path / "o").validate()


def test_summary_counts_replacements_and_discards_per_100_tokens():
    base = {"correct": False, "et_ratio": 0.1, "latency_s": 1.0, "corrupted": False, "text": "", "stop_reason": "eos"}
    rows = [{**base, "qid": 1, "method": "safe-unite", "tokens": 150, "replaced": 3, "discarded": 9},
            {**base, "qid": 2, "method": "safe-unite", "tokens": 50, "replaced": 1, "discarded": 3},
            {**base, "qid": 1, "method": "single:qwen", "tokens": 100}]  # an older row: no such fields
    by = {r["method"]: r for r in summarize(rows)}
    assert by["safe-unite"]["replaced_per_100"] == 2.0 and by["safe-unite"]["discarded_per_100"] == 6.0
    assert by["single:qwen"]["replaced_per_100"] == 0.0


def test_a_member_may_name_its_runtime_and_keeps_its_weight():
    """``qwen@llamacpp=2``: the pool loads qwen on llama.cpp, and the run (which names it qwen) weighs it 2."""
    (spec,) = parse_methods("safe-unite@qwen@llamacpp=2+gemma3")
    assert spec.members == ("qwen@llamacpp", "gemma3")
    assert dict(spec.weights) == {"qwen": 2.0}
    assert spec.settings(Settings()).weights == {"qwen": 2.0}
