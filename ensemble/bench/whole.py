"""``bench``'s headline: whole answers, the prompt read included, per method against qwen alone (the drafter) on the
same prompt, with where the time goes.

Users wait for whole answers: a new question's prompt read by every member, then every round. Each run here starts
as a new question does (:func:`ensemble.members.factory.forget_prompts`: a llama.cpp context handed on from the run
before keeps only the template head), and each method's run is interleaved with the drafter alone's on the same
prompt (A, drafter, B, drafter, ...), so that load on a shared machine hits both sides of every ratio alike.

The phases (seconds per generated token, summed over the prompts):

- ``prompt_<member>``: each member's first pass (its prompt read; SAFE's verifiers read the first draft with it);
- ``draft`` and ``verify``: the rounds' own timings (SAFE, SpecEM), the first passes included;
- ``discarded``: SAFE's drafting spent on draft tokens thrown away after a replacement (its share of ``draft``);
  SpecEM's losing segments are counted as tokens (``discarded_tokens``), drafted at the same time as the winner;
- ``passes``: for the methods without rounds, the time inside forward passes;
- ``bookkeeping``: the rest of the wall time (deciding, fusing, re-tokenizing, streaming, Python).

The steady state (``steady_s_per_token``) is the time after the first token, per later token.
"""

from __future__ import annotations

import statistics
import time

from ..capabilities import is_one_model


def plan_for(models: list, budget: int, lookahead: int) -> list[tuple[str, str, dict, list]]:
    """(label, method, settings, members) of the headline: every default method, SAFE with three members when given."""
    base = {"max_new_tokens": budget}
    two = models[:2]
    plan = [
        ("safe_unite", "safe", {**base, "lookahead": lookahead, "fusion": "unite"}, two),
        ("safe_gac", "safe", {**base, "lookahead": lookahead, "fusion": "gac"}, two),
        ("specem", "specem", base, two),
        ("unite", "unite", base, two),
    ]
    if len(models) > 2:
        plan.insert(2, ("safe_unite_three", "safe", {**base, "lookahead": lookahead, "fusion": "unite"}, models[:3]))
    return plan


def _run(members: list, prompt: str, method: str, settings_kwargs: dict):
    from ..members.factory import forget_prompts
    from ..methods import EnsembleRun
    from ..settings import Settings

    for m in members:
        forget_prompts(m)
    job = EnsembleRun(members, prompt, method, Settings(**settings_kwargs))
    t = time.perf_counter()
    for _ in job.events():
        pass
    elapsed = time.perf_counter() - t
    first = {a.name: (a.stats.first_s or 0.0) for a in job.adapters}
    return elapsed, job.trace, first


def _phases(elapsed: float, trace, first: dict[str, float]) -> dict[str, float]:
    out = {f"prompt_{name}": s for name, s in first.items()}
    sums: dict[str, float] = {}
    for r in trace.rounds:
        for k, v in r.timings.items():
            if isinstance(v, int | float) and k.endswith("_s") and k not in ("ahead_s", "overlap_s"):
                sums[k[:-2]] = sums.get(k[:-2], 0.0) + v
    stats = trace.stats
    if sums:
        out.update(sums)
        if stats.draft_tokens and "draft" in sums and trace.drafter is not None:
            out["discarded"] = sums["draft"] * stats.draft_discarded / stats.draft_tokens
        accounted = sum(sums.values())
    else:
        accounted = out["passes"] = sum(stats.forward_s.values())
    out["bookkeeping"] = max(0.0, elapsed - accounted)
    return out


def bench_whole(models: list, prompts: list[str], budget: int, lookahead: int, repeat: int, log=print) -> dict:
    """Whole answers of every method against the drafter alone (``models[0]``) on each prompt, interleaved,
    ``repeat`` times; each (entry, prompt) keeps its fastest run."""
    plan = [("drafter_alone", "single", {"max_new_tokens": budget}, models[:1]), *plan_for(models, budget, lookahead)]
    best: dict[tuple[str, int], tuple] = {}
    for _ in range(repeat):
        for p, prompt in enumerate(prompts):
            for label, method, settings_kwargs, members in plan:
                members = members[:1] if is_one_model(method) else members
                result = _run(members, prompt, method, settings_kwargs)
                log(f"whole {label}, prompt {p + 1}/{len(prompts)}: {result[1].stats.generated_tokens} tokens in {result[0]:.1f} s")
                if (label, p) not in best or result[0] < best[(label, p)][0]:
                    best[(label, p)] = result
    out: dict = {}
    for label, *_ in plan:
        runs = [best[(label, p)] for p in range(len(prompts))]
        tokens = sum(t.stats.generated_tokens for _, t, _ in runs)
        seconds = sum(e for e, _, _ in runs)
        firsts = [t.stats.first_token_s for _, t, _ in runs if t.stats.first_token_s is not None]
        steady = sum(e - (t.stats.first_token_s or 0.0) for e, t, _ in runs) / max(1, tokens - len(runs))
        phases: dict[str, float] = {}
        for e, t, f in runs:
            for k, v in _phases(e, t, f).items():
                phases[k] = phases.get(k, 0.0) + v
        passes: dict[str, int] = {}
        for _, t, _ in runs:
            for k, v in t.stats.forward_passes.items():
                passes[k] = passes.get(k, 0) + v
        out[label] = {
            "s_per_token": round(seconds / max(tokens, 1), 4),
            "per_prompt_s_per_token": [round(e / max(1, t.stats.generated_tokens), 4) for e, t, _ in runs],
            "steady_s_per_token": round(steady, 4),
            "first_token_s": round(statistics.mean(firsts), 3) if firsts else None,
            "tokens": tokens,
            "forward_passes": passes,
            "discarded_tokens": sum(t.stats.draft_discarded for _, t, _ in runs) if label != "specem" else
            sum(t.stats.draft_tokens for _, t, _ in runs) - tokens,
            "phase_s_per_token": {k: round(v / max(tokens, 1), 4) for k, v in phases.items()},
        }
    alone = out["drafter_alone"]
    for label, row in out.items():
        ratios = [a / b for a, b in zip(row["per_prompt_s_per_token"], alone["per_prompt_s_per_token"], strict=True)]
        row["ratio_to_drafter"] = round(row["s_per_token"] / alone["s_per_token"], 3)
        row["ratio_range"] = [round(min(ratios), 3), round(max(ratios), 3)]
        row["steady_ratio"] = round(row["steady_s_per_token"] / alone["steady_s_per_token"], 3)
        log(f"whole {label}: {row['s_per_token']:.4f} s/token, x{row['ratio_to_drafter']:.3f} {row['ratio_range']}")
    out["targets"] = {"safe_unite": 1.15, "safe_gac": 1.15, "safe_unite_three": 1.3, "specem": 1.5}
    return out


def whole_lines(report: dict) -> list[str]:
    """The headline's lines in ``bench``'s text report."""
    w = report["whole"]
    d = w["data"]
    lines = [
        f"\nwhole answers (prompt read included; the headline): {d['questions']} held-out GSM8K question(s) of {d['path']},"
        f" {d['max_new_tokens']} new tokens, interleaved with the drafter alone, best of {d['repeat']}",
        "  method             s/token  ratio [per prompt]      steady s/token (ratio)  first-token-s  passes",
    ]
    for label, r in w.items():
        if label in ("targets", "data"):
            continue
        target = w["targets"].get(label)
        lines.append(
            f"  {label:<17} {r['s_per_token']:>7.4f}  {r['ratio_to_drafter']:>5.2f}x {r['ratio_range']!s:<14}"
            f"  {r['steady_s_per_token']:>7.4f} ({r['steady_ratio']:.2f}x)       {r['first_token_s'] or '-':>6}"
            f"  {r['forward_passes']}" + (f"  target <= {target}x" if target else "")
        )
    lines.append("  where the time goes, seconds per token (prompt_<member>: its first pass; discarded: part of draft):")
    for label, r in w.items():
        if label in ("targets", "data"):
            continue
        lines.append(f"  {label:<17} " + "  ".join(f"{k} {v:.4f}" for k, v in r["phase_s_per_token"].items()))
    return lines
