"""``python -m ensemble evaluate``: run an evaluation (see :mod:`ensemble.evaluation`) from the command line."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from ..capabilities import is_one_model
from ..errors import EvaluationError, UnknownModelError
from ..evaluation import (
    GSM8K_TEST,
    SPEC_HELP,
    EvalConfig,
    check_compatible,
    load_questions,
    parse_methods,
    run_evaluation,
    select_questions,
    shown_path,
)
from ..files import check_output_folder, file_sha256
from ..models import DEFAULT_ENSEMBLE, ModelPool, resolve
from ..models.device import resolve_device
from ..models.runtimes import split_runtime
from .common import models_arg
from .options import add_backend_options, add_dtype_option, add_engine_options, backend_from_args, settings_from_args
from .report import print_summary, write_html_report


def _positive_int(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, not {value!r}") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {number}")
    return number


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data", default=None, help="GSM8K-format JSONL (question, answer ending in '#### n'; default: the "
                   "GSM8K test set shipped in the package, ensemble/data/gsm8k/test.jsonl)")
    p.add_argument("--limit", type=_positive_int, default=None, help="evaluate N questions chosen by --seed (default: all)")
    p.add_argument("--methods", required=True, help=f"comma list of: {SPEC_HELP} (ensemble methods use all of --models)")
    p.add_argument("--models", default=",".join(DEFAULT_ENSEMBLE), help="the ensemble's models (default: %(default)s)")
    p.add_argument("--out", required=True, help="output folder; rerunning the same command resumes it")
    p.add_argument("--device", default="cpu", help="cpu | cuda:N | auto")
    add_dtype_option(p)
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_engine_options(p)
    add_backend_options(p)
    p.set_defaults(func=cmd_evaluate)


def _command_line() -> str:
    argv = sys.argv
    if argv and Path(argv[0]).name == "__main__.py" and Path(argv[0]).parent.name == "ensemble":
        return shlex.join(["python", "-m", "ensemble", *argv[1:]])
    return shlex.join(argv)


def cmd_evaluate(args) -> int:
    specs = parse_methods(args.methods)
    resolve_device(args.device)  # cuda:1 on a machine with one GPU is refused before any question runs
    settings = settings_from_args(args)
    if args.data is None:
        args.data = shown_path(GSM8K_TEST)
    arguments = {k: v for k, v in vars(args).items() if k != "func"}
    config = EvalConfig(
        data=args.data, methods=specs, models=models_arg(args.models), settings=settings, out=args.out,
        limit=args.limit, device=args.device, dtype=args.dtype, command=_command_line(), arguments=arguments,
    ).validate()
    check_output_folder(config.out)
    for name in config.model_names():
        try:
            resolve(split_runtime(name)[0])
        except UnknownModelError as exc:
            where = f"single:{name}" if name not in config.models else "--models"
            raise EvaluationError(f"{where}: {exc}") from exc
    ensembles = [len(s.model_names(config.models)) for s in specs if not is_one_model(s.method)]
    backend = backend_from_args(args, members=max(ensembles, default=1))
    questions = load_questions(config.data)
    check_compatible(config.out, config.fingerprint(file_sha256(config.data)))
    # the single:NAME baseline runs in process, so its weights are loaded here too
    weights = not backend.remote or any(is_one_model(s.method) for s in specs)
    pool = ModelPool(device=args.device, dtype=args.dtype, runtime=args.runtime, weights=weights)
    loaded = {name: pool.get(name) for name in config.model_names()}
    selected = len(select_questions(questions, config.limit, settings.seed))
    print(f"evaluating {len(specs)} method(s) on {selected} question(s) into {config.out}", file=sys.stderr)
    # SIGTERM (``kill PID``) stops it like Ctrl-C (``cli.parser.main``): its rows are kept and the partial summary is
    # written; a run started in the background by a shell cannot be stopped with SIGINT, which such a shell ignores.
    run_evaluation(config, loaded, progress=not args.no_progress, write_html=write_html_report, backend=backend)
    return print_summary(config.out)
