"""The ``python -m ensemble`` parser: one subcommand per module of this package, and the exit codes."""

from __future__ import annotations

import argparse
import sys
import traceback

from ..errors import EnsembleError
from ..members import close_backends, interrupt_on_sigterm
from . import bench, blame, evaluate, explain, fork, generate, models, prepare, report, serve, tokenize

COMMANDS = {
    "models": (models, "known models, where each comes from, whether it is cached"),
    "prepare": (prepare, "assemble and de-quantize the embedded models (once)"),
    "tokenize": (tokenize, "compare tokenizations of a text"),
    "generate": (generate, "run a method on a prompt"),
    "fork": (fork, "continue a saved run from one of its tokens with another method, and compare"),
    "bench": (bench, "speed of every method on the embedded models"),
    "evaluate": (evaluate, "GSM8K-style evaluation of methods"),
    "report": (report, "rebuild an evaluation folder's summary and report.html from its rows"),
    "serve": (serve, "the ensemble as an OpenAI-compatible server (/v1/completions, /v1/chat/completions)"),
    "explain": (explain, "where two methods' answers to one evaluated question part, and what decided it"),
    "blame": (blame, "which ensemble decision changed an evaluated answer's outcome (counterfactual forks)"),
}
"""Each subcommand's module (which adds its arguments and runs it) and its one-line help."""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m ensemble", description="Ensemble Lens: run and inspect LLM ensembles.")
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    sub = p.add_subparsers(dest="command", required=True)
    for name, (module, help_text) in COMMANDS.items():
        module.add_arguments(sub.add_parser(name, help=help_text))
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    interrupt_on_sigterm()  # `kill PID` stops a command like Ctrl-C: what it made so far is kept, members are stopped
    try:
        return args.func(args)
    except EnsembleError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except OSError as exc:  # the file system refused something after the checks (disk full, a folder removed)
        where = f" with {exc.filename}" if exc.filename else ""
        print(f"error: {exc.strerror or exc}{where}; check that the path exists, is yours to use and its disk has room, "
              "then run the command again.", file=sys.stderr)
        return 2
    except Exception as exc:  # noqa: BLE001 - the CLI never shows a bare traceback unless asked
        if args.debug:
            traceback.print_exc()
        print(f"error: unexpected {type(exc).__name__}: {exc}. This is a bug in Ensemble Lens, not in your input: run "
              "the command again with --debug and report the traceback it shows.", file=sys.stderr)
        return 1
    finally:
        close_backends()  # member processes end with the command, however it ends
