"""The engine settings as command-line flags (shared by ``generate``, ``bench`` and ``evaluate``), and back."""

from __future__ import annotations

import argparse

from ..errors import SettingsError
from ..settings import GAC_GATE, Settings
from .common import models_arg


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


def settings_from_args(args) -> Settings:
    """The engine settings that the flags of :func:`add_engine_options` ask for."""
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
        drafters=models_arg(args.drafters) if args.drafters else None,
        verifiers=models_arg(args.verifiers) if args.verifiers is not None else None,
        stop_strings=args.stop,
        max_prompt_tokens=args.max_prompt_tokens,
    )
