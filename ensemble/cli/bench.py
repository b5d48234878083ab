"""``python -m ensemble bench``: the speed of every method on the embedded models (measured by :mod:`ensemble.bench.measure`)."""

from __future__ import annotations

import argparse
import json

from .. import settings
from ..bench.measure import (
    DEFAULT_DATA,
    PROMPTS,
    SECTIONS,
    bench_backends,
    bench_load,
    bench_methods,
    bench_retokenize,
    bench_runtimes,
    bench_single,
    bench_specem,
    log,
    reasoning_prompts,
)
from ..bench.report import format_report
from ..bench.whole import bench_whole
from ..errors import SettingsError
from ..models import DEFAULT_ENSEMBLE
from ..models.device import resolve_device
from ..settings import Settings
from .options import add_dtype_option


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--models", default=",".join(DEFAULT_ENSEMBLE), help="the ensemble's models (default: %(default)s)")
    # The engine settings bench varies come from Settings' declarations; bench's own defaults and help override.
    settings.add_arguments(p, only=("max_new_tokens", "seed", "lookahead"), max_new_tokens={"default": 48},
                           seed={"help": "which questions (as evaluate chooses them)"})
    p.add_argument("--prompts", type=int, default=2, help="how many of the built-in prompts to use (1-3)")
    p.add_argument("--repeat", type=int, default=3, help="best of N interleaved timings (default 3)")
    p.add_argument("--only", default=",".join(s for s in SECTIONS if s != "servers"),
                   help=f"comma list of sections: {', '.join(SECTIONS)} (default: all but servers, which starts llama.cpp servers)")
    p.add_argument("--data", default=None, help="GSM8K-format JSONL for the reasoning section "
                   f"(default: $ENSEMBLE_LENS_GSM8K or {DEFAULT_DATA})")
    p.add_argument("--limit", type=int, default=2, help="how many of its questions (the reasoning section's chosen by --seed; the whole answers' held out from the 60 "
                   "evaluated; default 2)")
    p.add_argument("--reasoning-tokens", type=int, default=128, help="answer length of the whole-answer and reasoning sections")
    p.add_argument("--specem-long", type=int, default=400, help="long SpecEM run for the linear-cost check")
    add_dtype_option(p)
    p.add_argument("--device", default="cpu")
    p.add_argument("--backends", default="local,ray", help="member backends the backends section compares (local,ray)")
    p.add_argument("--member-threads", type=int, default=None,
                   help="threads per member process (default: by role, SAFE's drafter every core, the others a share)")
    p.add_argument("--runtimes", default="transformers,llamacpp",
                   help="runtimes the runtimes section compares, the first as the reference; the first also computes "
                   "every other section (default transformers,llamacpp; --runtimes llamacpp --only backends compares the "
                   "backends on llama.cpp members)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_bench)


def runtime_names(args) -> list[str]:
    from ..models.runtimes import REGISTRY

    names = [r.strip() for r in args.runtimes.split(",") if r.strip()]
    bad = [r for r in names if r not in REGISTRY]
    if bad or len(names) < 1:
        raise SettingsError(f"--runtimes takes {' and/or '.join(REGISTRY)}; got {args.runtimes!r}.")
    return names


def first_runtime(args) -> str:
    return runtime_names(args)[0]


def _bench_servers(args, names: list[str], questions: list[str]) -> dict:
    """SAFE on llama.cpp servers started here against the same GGUFs in process (:mod:`ensemble.bench.servers`)."""
    from ..bench.servers import bench_servers, llama_servers
    from ..models import load, quiet_progress, resolve
    from ..models.runtimes import pick_runtime

    in_process = [load(n, "cpu", args.dtype, quiet_progress, runtime=pick_runtime(resolve(n), None, "cpu")) for n in names]
    with llama_servers(names) as urls:
        remote = [load(f"{n}={urls[n]}", progress=quiet_progress) for n in names]
        return bench_servers(in_process, remote, urls, questions, args.reasoning_tokens, args.lookahead, args.repeat)


def cmd_bench(args) -> int:
    names = [n.strip() for n in args.models.split(",") if n.strip()]
    for flag, value, lo in (("--prompts", args.prompts, 1), ("--repeat", args.repeat, 1), ("--limit", args.limit, 1),
                            ("--reasoning-tokens", args.reasoning_tokens, 1), ("--specem-long", args.specem_long, 1)):
        if value < lo:
            raise SettingsError(f"{flag} must be at least {lo}; got {value}.")
    if args.member_threads is not None and args.member_threads < 1:
        raise SettingsError("--member-threads must be at least 1.")
    resolve_device(args.device)
    runtime_names(args)  # a bad --runtimes is refused before anything loads
    Settings(max_new_tokens=args.max_new_tokens, lookahead=args.lookahead, seed=args.seed).validate("safe", names)
    sections = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = [s for s in sections if s not in SECTIONS]
    if unknown:
        raise SettingsError(f"Unknown bench section(s) {unknown}; choose from {', '.join(SECTIONS)}.")
    ensemble_only = [s for s in sections if s in ("whole", "methods", "reasoning", "specem", "backends", "runtimes", "servers")]
    if ensemble_only and len(names) < 2:
        raise SettingsError(f"The section(s) {', '.join(ensemble_only)} compare ensembles: give --models at least two "
                            "models, e.g. --models qwen,smollm2.")
    from ..members import BACKENDS

    chosen_backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    for name in chosen_backends if "backends" in sections else []:
        if name not in BACKENDS:
            raise SettingsError(f"Unknown backend {name!r} in --backends; choose from {', '.join(BACKENDS)}.")
    prompts = PROMPTS[: max(1, min(args.prompts, len(PROMPTS)))]
    wants_data = bool({"whole", "reasoning", "backends", "runtimes", "servers"} & set(sections))
    data, reasoning = reasoning_prompts(args.data, args.limit, args.seed) if wants_data else (None, [])
    backends = {}
    if "backends" in sections:
        from ..members import make_backend

        for name in chosen_backends:
            backends[name] = make_backend(name, threads=args.member_threads)
    import torch

    report: dict = {
        "machine": {"threads": torch.get_num_threads(), "torch": torch.__version__},
        "settings": {"models": names, "max_new_tokens": args.max_new_tokens, "prompts": len(prompts), "repeat": args.repeat},
    }
    report["machine"]["dtype"] = None
    loaded_as = first_runtime(args)
    loaded = bench_load(names, args.device, args.dtype, loaded_as)
    models = loaded["models"]
    report["machine"]["dtype"] = next(iter(models.values())).info["dtype"]
    ordered = [models[n] for n in names]
    data_info = {"path": data, "questions": len(reasoning), "seed": args.seed, "max_new_tokens": args.reasoning_tokens}
    if "whole" in sections and len(ordered) > 1:
        _, held_out = reasoning_prompts(args.data, args.limit, args.seed, held_out=True)
        report["whole"] = bench_whole(ordered, held_out, args.reasoning_tokens, args.lookahead, args.repeat, log)
        report["whole"]["data"] = {**data_info, "questions": len(held_out), "seed": "held out", "repeat": args.repeat}
    if "load" in sections:
        report["load"] = loaded["report"]
        log(f"warm load: {loaded['report']}")
    if "single" in sections:
        report["single"] = bench_single(models, prompts, args.max_new_tokens, args.repeat)
    if "retokenize" in sections:
        report["retokenize"] = bench_retokenize(models)
    if "methods" in sections and len(ordered) > 1:
        report["methods"] = bench_methods(ordered, prompts, args.max_new_tokens, args.lookahead, args.repeat)
    if "reasoning" in sections and len(ordered) > 1:
        report["reasoning"] = bench_methods(ordered, reasoning, args.reasoning_tokens, args.lookahead, args.repeat, specem=True)
        report["reasoning"]["data"] = data_info
    if "backends" in sections and len(ordered) > 1:
        report["backends"] = bench_backends(ordered, reasoning, args.reasoning_tokens, args.lookahead, args.repeat, backends)
        report["backends"]["data"] = data_info
    if "runtimes" in sections and len(ordered) > 1:
        per_runtime = {}
        for runtime in runtime_names(args):  # the models loaded above serve their own runtime
            found = models if runtime == loaded_as else bench_load(names, args.device, args.dtype, runtime)["models"]
            per_runtime[runtime] = [found[n] for n in names]
        report["runtimes"] = bench_runtimes(per_runtime, reasoning, args.reasoning_tokens, args.lookahead, args.repeat)
        report["runtimes"]["data"] = data_info
    if "specem" in sections and len(ordered) > 1:
        report["specem"] = bench_specem(ordered, prompts, args.max_new_tokens, args.specem_long, args.repeat)
    if "servers" in sections and len(ordered) > 1:
        report["servers"] = _bench_servers(args, names, reasoning)
        report["servers"]["data"] = data_info
    if args.json:
        print(json.dumps(report, indent=1))
    else:
        print(format_report(report))
    return 0
