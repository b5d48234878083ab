"""The engine settings as command-line flags (shared by ``generate``, ``bench`` and ``evaluate``), and back.

Both directions are generated from the declarations of :class:`ensemble.settings.Settings`' fields: a new setting
is one edit there."""

from __future__ import annotations

import argparse
import os

from .. import settings
from ..errors import SettingsError
from ..settings import Settings


def add_engine_options(p: argparse.ArgumentParser) -> None:
    """Every engine setting as a flag (shared by generate, bench and evaluate), made from ``Settings``' fields."""
    settings.add_arguments(p)


def settings_from_args(args) -> Settings:
    """The engine settings that the flags of :func:`add_engine_options` ask for."""
    return settings.from_args(args)


def add_dtype_option(p) -> None:
    """``--dtype``, its choices from :data:`ensemble.models.device.DTYPES` (declared once)."""
    from ..models.device import DTYPES

    p.add_argument("--dtype", default="auto", choices=DTYPES,
                   help="auto: bfloat16 on a GPU or a CPU with native bfloat16, else float32 (llama.cpp members keep "
                   "their GGUF's types)")


def add_backend_options(p: argparse.ArgumentParser) -> None:
    """Where the members compute (see :mod:`ensemble.members` and docs/distributed.md)."""
    from ..members import BACKEND_ENV, BACKENDS

    g = p.add_argument_group("member backend")
    g.add_argument(
        "--backend",
        choices=BACKENDS,
        default=os.environ.get(BACKEND_ENV) or "auto",
        help="local: members in this process, one after another; ray: one process (Ray actor) per member, computing at "
        f"the same time; auto: ray when --ray-address or --member-resources name a cluster, else local (on one machine "
        f"ray measured no faster throughout) (default: ${BACKEND_ENV} or auto)",
    )
    g.add_argument("--ray-address", default=None, help="join this Ray cluster (auto, ray://HOST:10001); default: start one here")
    g.add_argument(
        "--member-resources",
        default=None,
        metavar="NAME=RES:N[+RES:N],...",
        help="Ray resources per member, e.g. qwen=gpu:1,gemma3=node_b:0.5 (a custom resource pins a host)",
    )
    g.add_argument("--member-threads", type=int, default=None, help="torch threads per member process (default: cores / 3)")
    add_runtime_option(g)


def add_runtime_option(p) -> None:
    """``--runtime``: what computes each member's passes (a model named ``NAME@RUNTIME`` keeps its own)."""
    from ..models.runtimes import RUNTIME_ENV, RUNTIMES

    p.add_argument(
        "--runtime",
        choices=RUNTIMES,
        default=os.environ.get(RUNTIME_ENV) or "auto",
        help="transformers: any model, any device; llamacpp: GGUF files as shipped, on the CPU (embedded models, folders "
        "with a .gguf); auto: llamacpp for the embedded models on a CPU when llama-cpp-python is installed, else "
        f"transformers. Per model: --models qwen@llamacpp,gemma3@transformers (default: ${RUNTIME_ENV} or auto)",
    )


def backend_from_args(args, members: int = 3, names: list[str] | None = None):
    """The backend the flags of :func:`add_backend_options` ask for (checked before any model loads). For
    ``auto`` the choice and its reason go to stderr; ``members`` is how many models compute in one run, ``names``
    their names (a resource for a model not in the run is refused: it would be ignored without a word)."""
    import sys

    from ..members import auto_backend, make_backend, parse_resources

    if args.member_threads is not None and args.member_threads < 1:
        raise SettingsError("--member-threads must be at least 1.")
    resources = parse_resources(args.member_resources)
    if args.backend == "local" and (resources or args.ray_address):
        raise SettingsError("--ray-address and --member-resources need --backend ray (or leave --backend out).")
    strangers = [n for n in resources if names is not None and n not in names]
    if strangers:
        raise SettingsError(f"--member-resources names {', '.join(strangers)}, not a model of this run "
                            f"({', '.join(names)}); name the members as --models does.")
    device = getattr(args, "device", "cpu")
    if args.backend == "auto" and not (resources or args.ray_address):
        name, why = auto_backend(device, members)
        if getattr(args, "verbose", False):  # one line, and only when asked: every run starts with the answer
            print(f"[ensemble] member backend: {name} ({why.split(';')[0].split('. ')[0]})", file=sys.stderr)
    return make_backend(args.backend, args.ray_address, resources, args.member_threads, device=device, members=members)
