"""The text form of a ``python -m ensemble bench`` report (:mod:`ensemble.bench.measure` measures; this writes what it
measured as the lines the command prints without ``--json``)."""

from __future__ import annotations

from .whole import whole_lines


def format_report(report: dict) -> str:
    lines = [
        f"Ensemble Lens bench - {report['settings']} - {report['machine']['dtype']} - torch threads {report['machine']['threads']}"
    ]
    if "whole" in report:
        lines += whole_lines(report)
    if "load" in report:
        r = report["load"]
        lines.append(f"\nwarm load: {r['total_s']} s in total (target <= {r['target_s']} s) {r['per_model_s']}")
    if "single" in report:
        lines.append("\nsingle-model decoding: adapter vs model.generate (same tokens)")
        for name, r in report["single"].items():
            lines.append(
                f"  {name:<10} adapter {r['adapter_tokens_per_s']:>6.2f} tok/s  generate {r['generate_tokens_per_s']:>6.2f} tok/s"
                f"  ratio {r['ratio_adapter_to_generate']:.3f} (target <= 1.10)"
            )
    if "retokenize" in report:
        lines.append("\nre-tokenization per step (median microseconds) at response length 100 / 1000 / 4000 characters")
        for name, r in report["retokenize"].items():
            lines.append(f"  {name:<10} " + "  ".join(f"{v:>8.1f}" for v in r.values()))
    if "servers" in report:
        from .servers import server_lines

        lines += server_lines(report)
    for key, section in (("methods", _methods_lines), ("reasoning", _reasoning_lines), ("backends", _backends_lines),
                         ("runtimes", _runtimes_lines), ("specem", _specem_lines)):
        if key in report:
            lines += section(report)
    return "\n".join(lines)


def _methods_lines(report: dict) -> list[str]:
    lines: list[str] = []
    lines.append(
        "\nmethod          s/token  ratio-to-drafter  forward-only   E/T   fusion-ms/step  peak-RSS-MB  forward passes"
        "  (draft discarded)"
    )
    for label, r in report["methods"].items():
        if label in ("targets", "data"):
            continue
        lines.append(
            f"  {label:<13} {r['s_per_token']:>7.4f}  {r['ratio_to_drafter']:>8.3f}        {r['forward_only_ratio']:>8.3f}"
            f"     {r['et_ratio']:>6.3f}  {r['fusion_ms_per_step']:>10.3f}  {r['peak_rss_mb']:>10.1f}   {r['forward_passes']}"
            + (f"  ({r['draft_discarded']})" if r["draft_discarded"] else "")
        )
    lines.append(
        "  forward-only: seconds inside the method's forward passes per token over drafter-alone's whole s/token,"
        " the ratio these passes allow with zero other overhead"
    )
    lines.append(f"  targets: {report['methods']['targets']}")
    return lines


def _reasoning_lines(report: dict) -> list[str]:
    lines: list[str] = []
    d = report["reasoning"]["data"]
    lines.append(
        f"\nreasoning prompts: {d['questions']} GSM8K questions of {d['path']} (seed {d['seed']}),"
        f" {d['max_new_tokens']} new tokens"
    )
    lines.append(
        "  method          s/token  ratio-to-drafter  forward-only   E/T  replaced  gated  discarded/drafted"
        "  first-token-s  tokens"
    )
    for label, r in report["reasoning"].items():
        if label in ("targets", "data"):
            continue
        lines.append(
            f"  {label:<13} {r['s_per_token']:>7.4f}  {r['ratio_to_drafter']:>8.3f}        {r['forward_only_ratio']:>8.3f}"
            f"   {r['et_ratio']:>6.3f}  {r['replacements']:>6}  {r['gated']:>5}  {r['draft_discarded']:>6}/{r['draft_tokens']:<6}"
            f"     {r['first_token_s'] if r['first_token_s'] is not None else '-':>8}   {r['tokens']}"
        )
    lines.append("  (discarded: SAFE's draft tokens after a replacement; SpecEM's drafted counts every model's segments)")
    return lines


def _backends_lines(report: dict) -> list[str]:
    lines: list[str] = []
    b = report["backends"]
    d = b["data"]
    lines.append(f"\nmember backends {b['backends']} on {d['questions']} GSM8K question(s), {d['max_new_tokens']} new tokens")
    lines.append("  method@backend       s/token  ratio-to-drafter  speedup-over-local  E/T   first-token-s  bytes/round  "
                 "(as whole rows)  overlap")
    for label, r in b.items():
        if label in ("targets", "data", "backends"):
            continue
        lines.append(
            f"  {label:<19} {r['s_per_token']:>7.4f}  {r['ratio_to_drafter']:>8.3f}          {r.get('speedup_over_local', '-'):>8}"
            f"       {r['et_ratio']:>6.3f}  {r['first_token_s'] if r['first_token_s'] is not None else '-':>8}"
            f"  {r['member_bytes_per_round']:>11,}  {r['whole_row_bytes_per_round']:>15,}"
            f"  {r['overlap_share'] if r['overlap_share'] is not None else '-'}"
        )
    lines.append(f"  targets: {b['targets']}")
    return lines


def _runtimes_lines(report: dict) -> list[str]:
    r = report["runtimes"]
    d = r["data"]
    first = next(iter(r["runtimes"]))
    lines = [
        f"\nruntimes {r['runtimes']} on {d['questions']} GSM8K question(s), {d['max_new_tokens']} new tokens, {r['threads']} cores",
        f"  method@runtime                 s/token  ratio-to-{first}-drafter  speedup  E/T   first-token-s  passes",
    ]
    for label, row in r.items():
        if label in ("targets", "data", "runtimes", "threads"):
            continue
        lines.append(
            f"  {label:<29} {row['s_per_token']:>7.4f}  {row['ratio_to_drafter']:>8.3f}                 {row.get('speedup_over_first', '-'):>6}"
            f"  {row['et_ratio']:>6.3f}  {row['first_token_s'] if row['first_token_s'] is not None else '-':>8}  {row['forward_passes']}"
        )
    lines.append(f"  targets: {r['targets']}")
    return lines


def _specem_lines(report: dict) -> list[str]:
    lines: list[str] = []
    r = report["specem"]
    lines.append(
        f"\nSpecEM: {r['specem']['s_per_token']:.4f} s/token; sum of single models {r['sum_of_singles_s_per_token']:.4f}"
        f" -> ratio {r['ratio_to_sum_of_singles']:.3f} (target <= 1.5)"
    )
    lines.append(
        f"  without KV reuse (released code's recompute): {r['specem_no_cache']['s_per_token']:.4f} s/token"
        f" ({r['ratio_no_cache_to_cached']:.2f}x the cached run)"
    )
    lc = r["length_check"]
    long_key = next(k for k in lc if k.startswith("s_per_token_at_") and not k.endswith("_100"))
    lines.append(
        f"  per-token time at 100 tokens {lc['s_per_token_at_100']:.4f} s, at {long_key.rsplit('_', 1)[1]} tokens "
        f"{lc[long_key]:.4f} s -> ratio {lc['ratio']:.3f} (target <= 1.25); without KV reuse the same ratio is "
        f"{lc['no_cache_ratio']:.3f} and the long run is {list(lc.values())[-1]:.2f}x slower than with it"
    )
    return lines
