"""The bench's accounting on tiny models (what it reports and how the figures relate; no timing asserted)."""

from __future__ import annotations

from ensemble.bench.measure import bench_methods
from ensemble.bench.report import format_report


def test_methods_report_accounts_for_forward_time_and_draft_waste(tiny):
    models = [tiny["qwen"], tiny["smollm2"], tiny["gemma3"]]
    report = bench_methods(models, ["Sofia went to Plovdiv in 1999."], budget=10, lookahead=3, repeat=1)
    names = {m.name for m in models}
    assert report["drafter_alone"]["ratio_to_drafter"] == 1.0
    for label in ("drafter_alone", "unite", "gac", "safe_unite", "safe_gac"):
        row = report[label]
        inside = row["forward_s_per_token"]
        # Only models that ran have forward time; the drafter alone runs the first model only.
        assert set(inside) == ({"tiny-qwen"} if label == "drafter_alone" else names)
        assert all(v > 0 for v in inside.values())
        # Time inside forward passes is part of the whole time, so the forward-only ratio cannot exceed
        # the measured one (each figure is rounded to 3 places).
        assert row["forward_only_ratio"] <= row["ratio_to_drafter"] + 1e-3
        assert row["forward_only_ratio"] == round(sum(inside.values()) / report["drafter_alone"]["s_per_token"], 3)
    for label in ("drafter_alone", "unite", "gac"):
        assert report[label]["draft_discarded"] == 0  # no drafts outside SAFE
    for label in ("safe_unite", "safe_gac"):
        row = report[label]
        # A round drafts at most lookahead tokens (+4 to finish a character), so discards are bounded.
        assert 0 <= row["draft_discarded"] <= row["rounds"] * (3 + 4)
    text = format_report({"settings": {}, "machine": {"dtype": "float32", "threads": 1}, "methods": report})
    assert "forward-only" in text and "safe_gac" in text


def test_reasoning_section_uses_evaluates_questions_and_counts_replacements(tiny, tmp_path):
    import json

    from ensemble.bench.measure import reasoning_prompts
    from ensemble.evaluation import INSTRUCTION

    data = tmp_path / "q.jsonl"
    data.write_text("".join(json.dumps({"question": f"What is {i} + {i}?", "answer": f"#### {2 * i}"}) + "\n" for i in range(9)))
    path, prompts = reasoning_prompts(str(data), 2, 0)
    assert path == str(data) and len(prompts) == 2 and all(p.endswith(INSTRUCTION) for p in prompts)
    assert prompts == reasoning_prompts(str(data), 2, 0)[1] != reasoning_prompts(str(data), 2, 1)[1]
    models = [tiny["qwen"], tiny["smollm2"], tiny["gemma3"]]
    report = bench_methods(models, prompts[:1], budget=12, lookahead=3, repeat=1, specem=True)
    assert set(report) >= {"drafter_alone", "unite", "gac", "safe_unite", "safe_gac", "specem"}
    for label in ("safe_unite", "safe_gac"):
        row = report[label]
        assert row["replacements"] <= row["rounds"] and row["draft_discarded"] <= row["draft_tokens"]
        assert row["first_token_s"] is not None
    assert report["unite"]["replacements"] == 0 and report["unite"]["gated"] == 0
    report["data"] = {"path": path, "questions": 1, "seed": 0, "max_new_tokens": 12}
    text = format_report({"settings": {}, "machine": {"dtype": "float32", "threads": 1}, "reasoning": report})
    assert "reasoning prompts: 1 GSM8K questions" in text and "specem" in text


def test_whole_answers_headline_reads_each_prompt_and_accounts_for_phases(tiny):
    """bench's headline: whole answers on held-out questions, each member's prompt read counted in its first pass,
    the phases adding up to the whole time, ratios against the drafter alone."""
    from ensemble.bench.whole import bench_whole, whole_lines
    from ensemble.evaluation import GSM8K_TEST, load_questions, select_held_out, select_questions

    questions = load_questions(GSM8K_TEST)
    held = select_held_out(questions, 3)
    assert len(held) == 3 and not {q.question for q in held} & {q.question for q in select_questions(questions, 60, 0)}
    models = [tiny["qwen"], tiny["smollm2"], tiny["gemma3"]]
    report = bench_whole(models, ["Sofia went to Plovdiv in 1999."], budget=10, lookahead=3, repeat=1, log=lambda _: None)
    assert set(report) >= {"drafter_alone", "safe_unite", "safe_gac", "safe_unite_three", "specem", "unite"}
    assert report["drafter_alone"]["ratio_to_drafter"] == 1.0
    for label, row in report.items():
        if label == "targets":
            continue
        phases = row["phase_s_per_token"]
        members = row["forward_passes"]
        assert {f"prompt_{m}" for m in members} <= set(phases) and all(phases[f"prompt_{m}"] > 0 for m in members)
        assert sum(v for k, v in phases.items() if not k.startswith("prompt_") and k != "discarded") <= row["s_per_token"] + 2e-3
        assert row["steady_s_per_token"] >= 0 and row["first_token_s"] is not None
    assert {"draft", "verify"} <= set(report["safe_unite"]["phase_s_per_token"])
    assert set(report["safe_unite_three"]["forward_passes"]) == {m.name for m in models}
    report["data"] = {"path": "x.jsonl", "questions": 1, "max_new_tokens": 10, "repeat": 1}
    text = "\n".join(whole_lines({"whole": report}))
    assert "whole answers" in text and "prompt_tiny-smollm2" in text and "target <= 1.15x" in text
