"""The bench's accounting on tiny models (what it reports and how the figures relate; no timing asserted)."""

from __future__ import annotations

from ensemble.bench import bench_methods, format_report


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
