"""``python -m ensemble bench``: speed of loading, decoding, re-tokenizing and every method, in one run.

Ratios matter more than seconds on a shared, noisy machine, so every comparison is measured in the same
process, back to back, on the same prompts and token budget (each timing is the best of ``--repeat`` runs).

The ``reasoning`` section measures what users run: GSM8K questions (``--data``, ``--limit`` of them chosen
by ``--seed`` as ``evaluate`` chooses them, with evaluate's instruction) answered at ``--reasoning-tokens``
(default 128) by every method, reporting time per token against the drafter alone, E/T, replacements,
discarded drafts and first-token time.
"""

from __future__ import annotations

import sys
import threading
import time
from dataclasses import replace

from ..capabilities import is_one_model

PROMPTS = [
    "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. "
    "How many clips did Natalia sell altogether in April and May?",
    "Sofia went to Plovdiv in 1999 and to Veliko Tarnovo in 2004. Write two sentences about her trips.",
    "Write a Python function that returns the n-th Fibonacci number.",
]
SECTIONS = ("whole", "load", "single", "retokenize", "methods", "reasoning", "specem", "backends", "runtimes", "servers")
DEFAULT_DATA = "ensemble/data/gsm8k/test.jsonl"
"""The GSM8K test set shipped in the package (``ENSEMBLE_LENS_GSM8K`` or ``--data`` overrides it)."""


class PeakMemory:
    """Peak resident memory of this process while the block runs (sampled every 20 ms)."""

    def __enter__(self):
        import psutil

        self._proc = psutil.Process()
        self.peak = self._proc.memory_info().rss
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self):
        while not self._stop.wait(0.02):
            self.peak = max(self.peak, self._proc.memory_info().rss)

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self._proc.memory_info().rss)
        self.peak_mb = round(self.peak / 2**20, 1)


def log(msg: str) -> None:
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


def bench_load(names: list[str], device: str = "cpu", dtype: str = "auto", runtime: str = "transformers") -> dict:
    from ..models import load, quiet_progress
    from ..models.runtimes import runtime_info

    cold = [n for n in names if not runtime_info(runtime).prepared(n)]
    started = time.perf_counter()
    models = {}
    per_model = {}
    for name in names:
        t = time.perf_counter()
        models[name] = load(name, device=device, dtype=dtype, progress=quiet_progress, runtime=runtime)
        per_model[name] = round(time.perf_counter() - t, 2)
    total = round(time.perf_counter() - started, 2)
    return {"models": models, "report": {"total_s": total, "per_model_s": per_model, "cold": cold, "target_s": 10.0}}


def bench_single(models: dict, prompts: list[str], budget: int, repeat: int) -> dict:
    """Adapter decoding vs ``model.generate``: same prompt, greedy, seconds per token of each."""
    import torch

    from ..methods import generate
    from ..settings import Settings

    out = {}
    for name, m in models.items():
        ours, ref, tokens = [], [], 0
        for prompt in prompts:
            ids = torch.tensor([m.prompt_ids(prompt)])
            best_ours = best_ref = float("inf")
            for _ in range(repeat):
                t = time.perf_counter()
                trace = generate([m], prompt, "single", Settings(max_new_tokens=budget, stop_strings=[]))
                best_ours = min(best_ours, time.perf_counter() - t)
                with torch.inference_mode():
                    t = time.perf_counter()
                    gen = m.model.generate(ids, max_new_tokens=budget, do_sample=False)
                    best_ref = min(best_ref, time.perf_counter() - t)
            n_ref = gen.shape[1] - ids.shape[1]
            n_ours = trace.stats.generated_tokens + (1 if trace.stats.stop_reason == "eos" else 0)
            ours.append(best_ours / max(n_ours, 1))
            ref.append(best_ref / max(n_ref, 1))
            tokens += n_ours
        s_ours, s_ref = sum(ours) / len(ours), sum(ref) / len(ref)
        out[name] = {
            "adapter_s_per_token": round(s_ours, 4),
            "generate_s_per_token": round(s_ref, 4),
            "adapter_tokens_per_s": round(1 / s_ours, 2),
            "generate_tokens_per_s": round(1 / s_ref, 2),
            "ratio_adapter_to_generate": round(s_ours / s_ref, 3),
            "tokens": tokens,
        }
        log(f"single {name}: adapter {1 / s_ours:.2f} tok/s, generate {1 / s_ref:.2f} tok/s")
    return out


def bench_retokenize(models: dict) -> dict:
    """Cost of one re-sync step (append a few characters) as the response grows: it must stay flat."""
    from ..methods.member import ModelAdapter

    words = ["The", "quick", "brown", "fox", "jumps", "over", "the", "lazy", "dog;", "Sofia", "went", "to", "Plovdiv", "in", "1999,", "中文", "🙂", "x=42.", ""]
    out = {}
    for name, m in models.items():
        adapter = ModelAdapter(m)
        adapter.start("bench")
        text, marks, at = "", {}, 0
        timings: dict[int, list[float]] = {100: [], 1000: [], 4000: []}
        while len(text) < 4200:
            text += words[at % len(words)] + " "
            at += 1
            t = time.perf_counter()
            adapter.sync(text)
            dt = time.perf_counter() - t
            for size in timings:
                if size <= len(text) < size + 200:
                    timings[size].append(dt)
        marks = {f"{size}_chars_us": round(1e6 * sorted(v)[len(v) // 2], 1) for size, v in timings.items() if v}
        out[name] = marks
        log(f"retokenize {name}: {marks}")
    return out


def _measure(models: list, prompts: list[str], plan: list[tuple], repeat: int) -> dict[str, dict]:
    """Run every (label, method, settings, run options) of ``plan`` on every prompt, ``repeat`` times,
    INTERLEAVED (A B C A B C ...) so that drift on a shared machine hits every entry alike; each
    (entry, prompt) keeps its fastest run."""
    from ..methods import EnsembleRun
    from ..settings import Settings

    best: dict[tuple[str, int], tuple[float, object]] = {}
    peak: dict[str, float] = {}
    for _ in range(repeat):
        for label, method, settings_kwargs, run_kwargs in plan:
            entry_models = models[:1] if is_one_model(method) and run_kwargs.get("solo") is None else models
            entry_models = run_kwargs.get("solo") or entry_models
            extra = {k: v for k, v in run_kwargs.items() if k not in ("solo", "threads")}
            for p, prompt in enumerate(prompts):
                with PeakMemory() as mem:
                    job = EnsembleRun(entry_models, prompt, method, Settings(**settings_kwargs), **extra)
                    if run_kwargs.get("threads"):  # a thread count for every llama.cpp member of this entry
                        for adapter in job.adapters:
                            adapter.configure(replace(adapter.policy, threads=run_kwargs["threads"]))
                    t = time.perf_counter()
                    for _ in job.events():
                        pass
                    elapsed = time.perf_counter() - t
                peak[label] = max(peak.get(label, 0.0), mem.peak_mb)
                log(f"{label}, prompt {p + 1}/{len(prompts)}: {job.trace.stats.generated_tokens} tokens in {elapsed:.1f} s")
                if (label, p) not in best or elapsed < best[(label, p)][0]:
                    best[(label, p)] = (elapsed, job.trace)
    out = {}
    for label, *_ in plan:
        runs = [best[(label, p)] for p in range(len(prompts))]
        seconds = sum(e for e, _ in runs)
        traces = [t for _, t in runs]
        tokens = sum(t.stats.generated_tokens for t in traces)
        passes: dict[str, int] = {}
        inside: dict[str, float] = {}
        for t in traces:
            for k, v in t.stats.forward_passes.items():
                passes[k] = passes.get(k, 0) + v
            for k, v in t.stats.forward_s.items():
                inside[k] = inside.get(k, 0.0) + v
        fusion = [t.stats.fusion_ms_mean for t in traces if t.stats.fusion_ms_mean]
        first = [t.stats.first_token_s for t in traces if t.stats.first_token_s is not None]
        out[label] = {
            "s_per_token": round(seconds / max(tokens, 1), 4),
            "tokens": tokens,
            "et_ratio": round(sum(t.stats.et_ratio for t in traces) / len(traces), 4),
            "forward_passes": passes,
            "forward_s_per_token": {k: round(v / max(tokens, 1), 4) for k, v in inside.items()},
            "draft_discarded": sum(t.stats.draft_discarded for t in traces),
            "draft_tokens": sum(t.stats.draft_tokens for t in traces),
            "replacements": sum(t.stats.decisions.get("ensembled_replaced", 0) for t in traces),
            "gated": sum(t.stats.decisions.get("gated", 0) for t in traces),
            "fusion_ms_per_step": round(sum(fusion) / len(fusion), 3) if fusion else 0.0,
            "rounds": sum(t.stats.rounds for t in traces),
            "first_token_s": round(sum(first) / len(first), 3) if first else None,
            "peak_rss_mb": peak[label],
            "member_bytes_per_round": _per_round(traces, "member_bytes"),
            "whole_row_bytes_per_round": _per_round(traces, "member_row_bytes"),
            "overlap_share": _overlap_share(traces),
            "phase_s_per_token": _phases(traces, tokens),
        }
    return out


def _per_round(traces, stat: str) -> int:
    """A stats dict's total per round (SAFE, SpecEM) or per token (the others)."""
    rounds = sum(t.stats.rounds or t.stats.generated_tokens for t in traces)
    return round(sum(sum(getattr(t.stats, stat).values()) for t in traces) / max(1, rounds))


def _phases(traces, tokens: int) -> dict[str, float]:
    """Seconds per generated token in each phase the rounds record (SAFE: draft, verify, decide, and drafting ahead
    with its overlap; SpecEM: its phases), where the time goes."""
    sums: dict[str, float] = {}
    for t in traces:
        for r in t.rounds:
            for k, v in r.timings.items():
                if isinstance(v, int | float):
                    sums[k] = sums.get(k, 0.0) + v
    return {k: round(v / max(tokens, 1), 4) for k, v in sums.items()}


def _overlap_share(traces) -> float | None:
    """Pipelined SAFE: the share of the verification time during which the drafter drafted ahead."""
    verify = sum(r.timings.get("verify_s", 0.0) + r.timings.get("ahead_s", 0.0) for t in traces for r in t.rounds)
    overlap = sum(r.timings.get("overlap_s", 0.0) for t in traces for r in t.rounds)
    return round(overlap / verify, 3) if overlap and verify else None


def bench_backends(models: list, prompts: list[str], budget: int, lookahead: int, repeat: int, backends: dict) -> dict:
    """Every method on each member backend, side by side in one interleaved run: time per token against the
    drafter alone (in process), each backend against the local one, bytes crossing per round or step."""
    base = {"max_new_tokens": budget}
    plan = [("drafter_alone", "single", base, {})]
    for name, backend in backends.items():
        run = {"backend": backend}
        if name != "local":
            plan.append((f"drafter_alone@{name}", "single", base, run))
        plan += [
            (f"unite@{name}", "unite", base, run),
            (f"safe_unite@{name}", "safe", {**base, "lookahead": lookahead, "fusion": "unite"}, run),
            (f"safe_gac@{name}", "safe", {**base, "lookahead": lookahead, "fusion": "gac"}, run),
            (f"specem@{name}", "specem", base, run),
        ]
    out = _measure(models, prompts, plan, repeat)
    drafter = out["drafter_alone"]["s_per_token"]
    for label, row in out.items():
        row["ratio_to_drafter"] = round(row["s_per_token"] / drafter, 3)
        row["forward_only_ratio"] = round(sum(row["forward_s_per_token"].values()) / drafter, 3)
        method, _, where = label.partition("@")
        local = out.get(f"{method}@local")
        if where and where != "local" and local:
            row["speedup_over_local"] = round(local["s_per_token"] / row["s_per_token"], 3)
        log(f"{label}: {row['s_per_token']:.4f} s/token, x{row['ratio_to_drafter']:.3f} of the drafter alone")
    out["targets"] = {"safe_ratio_max": 1.3, "unite_and_specem_speedup_min": 1.3}
    out["backends"] = {name: b.describe() for name, b in backends.items()}
    return out


def bench_runtimes(runtimes: dict[str, list], prompts: list[str], budget: int, lookahead: int, repeat: int) -> dict:
    """The drafter alone, SAFE, every-token UniTE and SpecEM with the same members on each runtime, side by side
    in one interleaved run (``runtimes``: runtime name -> the loaded members in order, the drafter first). Each
    row's ``ratio_to_drafter`` is against the first runtime's drafter alone (today's transformers run), and
    ``speedup_over_first`` against the same method on the first runtime. ``drafter_alone@llamacpp_1thread`` is
    the drafter on a single llama.cpp thread (the issue's target: >= 1.5x transformers on every core); llama.cpp
    ensembles run both ways, ``_threads`` (members at once, in threads) and ``_turns`` (one after another), which
    is what :meth:`ensemble.members.local.LocalBackend.for_run` chooses between."""
    import os

    from ..members.local import SEQUENTIAL, THREADS
    from ..models.runtimes import runtime_info

    base = {"max_new_tokens": budget}
    safe = {**base, "lookahead": lookahead}
    plan = []
    for name, members in runtimes.items():
        plan.append((f"drafter_alone@{name}", "single", base, {"solo": members[:1]}))
        if not runtime_info(name).thread_safe:  # members take turns: one way to run them
            plan += [(f"{m}@{name}", m, s, {"solo": members}) for m, s in (("safe", safe), ("unite", base), ("specem", base))]
            continue
        if (os.cpu_count() or 1) > 1:
            plan.append((f"drafter_alone@{name}_1thread", "single", base, {"solo": members[:1], "threads": 1}))
        # members computing at once in threads (a share of the cores each), and taking turns (every core each)
        for mode, backend in (("threads", THREADS), ("turns", SEQUENTIAL)):
            plan += [(f"{m}@{name}_{mode}", m, s, {"solo": members, "backend": backend}) for m, s in (("safe", safe), ("unite", base), ("specem", base))]
    out = _measure(next(iter(runtimes.values())), prompts, plan, repeat)
    first = next(iter(runtimes))
    drafter = out[f"drafter_alone@{first}"]["s_per_token"]
    for label, row in out.items():
        method, _, where = label.partition("@")
        row["ratio_to_drafter"] = round(row["s_per_token"] / drafter, 3)
        same = out.get(f"{method}@{first}")
        if where != first and same:
            row["speedup_over_first"] = round(same["s_per_token"] / row["s_per_token"], 3)
        log(f"{label}: {row['s_per_token']:.4f} s/token, x{row['ratio_to_drafter']:.3f} of the {first} drafter alone")
    out["targets"] = {"drafter_1thread_speedup_min": 1.5, "ensemble_speedup_min": 2.0, "app_first_safe_token_s_max": 1.0}
    out["runtimes"] = {name: [f"{m.name} ({m.info['dtype']})" for m in members] for name, members in runtimes.items()}
    out["threads"] = os.cpu_count()
    return out


def bench_methods(models: list, prompts: list[str], budget: int, lookahead: int, repeat: int, specem: bool = False) -> dict:
    """Drafter alone, UniTE, GaC and SAFE (both fusions), and SpecEM when asked, on the same prompts; ratios
    to the drafter."""
    base = {"max_new_tokens": budget}
    plan = [
        ("drafter_alone", "single", base, {}),
        ("unite", "unite", base, {}),
        ("gac", "gac", base, {}),
        ("safe_unite", "safe", {**base, "lookahead": lookahead, "fusion": "unite"}, {}),
        ("safe_gac", "safe", {**base, "lookahead": lookahead, "fusion": "gac"}, {}),
    ]
    if specem:
        plan.append(("specem", "specem", base, {}))
    out = _measure(models, prompts, plan, repeat)
    drafter = out["drafter_alone"]["s_per_token"]
    for label, row in out.items():
        row["ratio_to_drafter"] = round(row["s_per_token"] / drafter, 3)
        # The time inside the method's forward passes alone, over the drafter-alone run's whole time: the
        # ratio an implementation with no overhead besides those very passes would reach. When it is above
        # a target, only fewer or cheaper passes (another algorithm or other models) can meet it.
        row["forward_only_ratio"] = round(sum(row["forward_s_per_token"].values()) / drafter, 3)
        log(f"{label}: {row['s_per_token']:.4f} s/token, x{row['ratio_to_drafter']:.3f}, E/T {row['et_ratio']:.3f}")
    out["targets"] = {"safe_ratio_max": 1.3, "unite_fusion_ms_max": 5, "gac_fusion_ms_max": 20}
    return out


def bench_specem(models: list, prompts: list[str], budget: int, long_budget: int, repeat: int) -> dict:
    """SpecEM against the sum of the models' single per-token times, a no-cache variant, and 100 vs 400 tokens."""
    base = {"max_new_tokens": budget}
    plan = [(f"single_{m.name}", "single", base, {"solo": [m]}) for m in models]
    plan += [("specem", "specem", base, {}), ("specem_no_cache", "specem", base, {"recompute_context": True})]
    rows = _measure(models, prompts, plan, repeat)
    singles = {m.name: rows[f"single_{m.name}"]["s_per_token"] for m in models}
    total_single = sum(singles.values())
    out = {"single": singles, "sum_of_singles_s_per_token": round(total_single, 4)}
    out["specem"], out["specem_no_cache"] = rows["specem"], rows["specem_no_cache"]
    out["ratio_to_sum_of_singles"] = round(out["specem"]["s_per_token"] / total_single, 3)
    out["ratio_no_cache_to_cached"] = round(out["specem_no_cache"]["s_per_token"] / out["specem"]["s_per_token"], 3)
    log(f"specem: {out['specem']['s_per_token']:.4f} s/token (sum of singles {total_single:.4f})")
    # Linear cost: time per token of a 100-token and a long run with no early stop (stop strings off).
    long_prompt = "Write a long, detailed story about a journey from Sofia to Plovdiv, in many paragraphs."
    lengths = [
        ("at_100", "specem", {"max_new_tokens": 100, "stop_strings": []}, {}),
        (f"at_{long_budget}", "specem", {"max_new_tokens": long_budget, "stop_strings": []}, {}),
        ("no_cache_at_100", "specem", {"max_new_tokens": 100, "stop_strings": []}, {"recompute_context": True}),
        (f"no_cache_at_{long_budget}", "specem", {"max_new_tokens": long_budget, "stop_strings": []}, {"recompute_context": True}),
    ]
    runs = _measure(models, [long_prompt], lengths, 1)
    out["length_check"] = {
        "s_per_token_at_100": runs["at_100"]["s_per_token"],
        f"s_per_token_at_{long_budget}": runs[f"at_{long_budget}"]["s_per_token"],
        "tokens": [runs["at_100"]["tokens"], runs[f"at_{long_budget}"]["tokens"]],
        "ratio": round(runs[f"at_{long_budget}"]["s_per_token"] / runs["at_100"]["s_per_token"], 3),
        "no_cache_ratio": round(runs[f"no_cache_at_{long_budget}"]["s_per_token"] / runs["no_cache_at_100"]["s_per_token"], 3),
        f"no_cache_slowdown_at_{long_budget}": round(
            runs[f"no_cache_at_{long_budget}"]["s_per_token"] / runs[f"at_{long_budget}"]["s_per_token"], 3
        ),
    }
    out["targets"] = {"ratio_to_sum_of_singles_max": 1.5, "length_ratio_max": 1.25}
    return out


def reasoning_prompts(data: str | None, limit: int, seed: int, held_out: bool = False) -> tuple[str, list[str]]:
    """The data file used and ``limit`` of its questions as evaluate asks them (``held_out``: outside the 60 the
    project evaluates, :func:`ensemble.evaluation.select_held_out`)."""
    import os
    from pathlib import Path

    from ..errors import SettingsError
    from ..evaluation import GSM8K_TEST, build_prompt, load_questions, select_held_out, select_questions, shown_path

    if limit < 1:
        raise SettingsError(f"--limit must be at least 1; got {limit}.")
    path = data or os.environ.get("ENSEMBLE_LENS_GSM8K") or shown_path(GSM8K_TEST)
    if not Path(path).is_file():
        raise SettingsError(f"No GSM8K file at {path}: pass --data PATH.jsonl (or leave reasoning out of --only).")
    found = load_questions(path)
    questions = select_held_out(found, limit) if held_out else select_questions(found, limit, seed)
    return path, [build_prompt(q.question) for q in questions]
