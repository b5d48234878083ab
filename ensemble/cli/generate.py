"""``python -m ensemble generate``: run a method on a prompt, streaming its tokens coloured by decision."""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import threading
import unicodedata

from ..capabilities import is_one_model
from ..errors import MemberDied, OutputError, SettingsError
from ..files import check_distinct_outputs, check_output_file, write_output
from ..models import DEFAULT_ENSEMBLE
from ..models.device import resolve_device
from ..trace.readable import DECISION_WORDS, STOP_WORDS, decisions_text, et_text, method_decisions
from .common import models_arg, read_text, write_document
from .options import add_backend_options, add_dtype_option, add_engine_options, backend_from_args, settings_from_args

ANSI = {
    "consensus": "\x1b[32m",
    "oov_blocked": "\x1b[33m",
    "ensembled_kept": "\x1b[36m",
    "ensembled_replaced": "\x1b[35m",
    "fused": "\x1b[34m",
    "gated": "\x1b[90m",
}


DIM = "\x1b[2;3m"  # a drafted token being checked: faint and italic (no decision's colour)


def columns(text: str) -> int:
    """Terminal cells ``text`` takes (wide East Asian characters two, combining marks none)."""
    return sum(0 if unicodedata.combining(c) else 2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)


class DraftLine:
    """SAFE's drafts on a terminal: each drafted token printed faint after the answer so far, and erased (cursor back,
    clear to the end of the line) when the round's verified tokens are printed in its place. Only what fits on the
    current line is shown: a draft that holds a line break, a control character or would wrap is left out (erasing
    across lines is not reliable once the screen scrolls)."""

    def __init__(self, width: int):
        self.width = max(width, 2)
        self.column = 0  # cells of the answer's current line printed so far
        self.drafted = 0  # cells of drafts on screen
        self.full = False  # this round's draft stopped fitting the line: show no more of it

    def show(self, event) -> str:
        piece = event.text[event.start : event.end]
        if event.index == 0:
            self.full = False
        if self.full or not piece or not piece.isprintable():
            self.full = self.full or bool(piece)
            return ""
        cells = columns(piece)
        at = self.column % self.width
        if (at == 0 and self.column) or at + self.drafted + cells >= self.width:
            self.full = True
            return ""
        self.drafted += cells
        return DIM + piece + "\x1b[0m"

    def erase(self) -> str:
        out = f"\x1b[{self.drafted}D\x1b[K" if self.drafted else ""
        self.drafted, self.full = 0, False
        return out

    def printed(self, text: str) -> None:
        """The answer's ``text`` was printed: where the current line now ends."""
        line = text.rsplit("\n", 1)
        self.column = columns(line[-1]) if len(line) > 1 else self.column + columns(text)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--method", default="single", help="single | unite | gac | safe | specem")
    p.add_argument("--models", default=None, help=f"comma list (default: qwen for single, {','.join(DEFAULT_ENSEMBLE)} "
                   "for the ensemble methods)")
    p.add_argument("--prompt", default=None)
    p.add_argument("--prompt-file", default=None)
    p.add_argument("--json", action="store_true", help="print the trace as JSON")
    p.add_argument("--out", default=None, help="also save the trace JSON to this file")
    p.add_argument("--html", default=None, metavar="PATH",
                   help="also save the run as one self-contained HTML file (strip, inspector on click, stats; opens offline)")
    p.add_argument("--verbose", action="store_true")
    p.add_argument("--device", default="cpu", help="cpu | cuda:N | auto")
    add_dtype_option(p)
    add_engine_options(p)
    add_backend_options(p)
    p.set_defaults(func=cmd_generate)


def cmd_generate(args) -> int:
    from ..methods import DraftEvent, EnsembleRun, RoundEvent, StatusEvent, TokenEvent
    from ..models import ModelPool
    from ..preflight import preflight

    if args.prompt is not None and args.prompt_file is not None:
        raise SettingsError("Give the prompt once: --prompt TEXT or --prompt-file PATH, not both.")
    prompt = read_text(args.prompt_file, "surrogateescape") if args.prompt_file else args.prompt
    if prompt is None:
        raise SettingsError("Give a prompt with --prompt TEXT or --prompt-file PATH.")
    settings = settings_from_args(args)
    names = models_arg(args.models or ("qwen" if is_one_model(args.method) else ",".join(DEFAULT_ENSEMBLE)))
    # Validate before loading anything: bad input or an unwritable --out fails in milliseconds, not after a run.
    request = preflight(prompt, args.method, names, settings)  # qwen@llamacpp is the member qwen on llama.cpp
    resolve_device(args.device)  # a device this machine lacks is refused now, not after the other flags' checks
    check_distinct_outputs(out=args.out, html=args.html)
    for path in (args.out, args.html):
        if path:
            check_output_file(path)
    backend = backend_from_args(args, members=1 if is_one_model(args.method) else len(names), names=request.members)
    pool = ModelPool(device=args.device, dtype=args.dtype, runtime=args.runtime, weights=not backend.remote)
    stop = threading.Event()
    job = EnsembleRun.from_request(request, pool.get_many(request.names), cancel=stop, backend=backend)
    color = sys.stdout.isatty() and not args.json and os.environ.get("NO_COLOR") is None
    if color:
        print(legend_line(args.method, job.trace.settings), file=sys.stderr)
    printed, failed = 0, None
    drafts = DraftLine(shutil.get_terminal_size().columns) if color else None  # a terminal shows drafts being checked
    events = job.events()
    try:
        for event in events:
            if isinstance(event, DraftEvent):
                if drafts is not None:
                    print(drafts.show(event), end="", flush=True)
                continue
            if drafts is not None and isinstance(event, TokenEvent | RoundEvent):
                print(drafts.erase(), end="")  # the round is decided: its verified tokens take the drafts' place
            if args.json or not isinstance(event, TokenEvent):
                if isinstance(event, RoundEvent) and args.verbose and not args.json:
                    print(f"\n[round {event.record.index}: {event.record.winner} wins]", file=sys.stderr)
                elif isinstance(event, StatusEvent) and args.verbose and not args.json:
                    print(f"\n[{event.message}]", file=sys.stderr)
                continue
            rec = event.record
            if rec.end <= printed:
                continue  # another byte token of a character already shown
            piece, printed = event.text[printed : rec.end], rec.end
            if drafts is not None:
                drafts.printed(piece)
            if color and rec.decision in ANSI:
                piece = ANSI[rec.decision] + piece + "\x1b[0m"
            print(piece, end="", flush=True)
    except KeyboardInterrupt:
        stop.set()
        try:
            for _ in events:  # interrupted between events: the run ends at its next check, as a Stop's does
                pass
        except MemberDied as exc:
            failed = exc
    except MemberDied as exc:
        failed = exc  # the trace so far is kept (and saved with --out)
    finally:
        if drafts is not None:  # drafts of a round that was never decided (Stop, a failure, a cut stop string)
            print(drafts.erase(), end="", flush=True)
    trace = job.trace
    unsaved = save_outputs(args, trace)
    if args.json:  # printed whatever happened to the files: the run is never lost
        print(trace.to_json())
    if failed is not None:
        print(f"\nerror: {failed}", file=sys.stderr)
        return 1
    if unsaved:
        return 2
    if args.json:
        return 0
    s = trace.stats
    print()
    for w in trace.warnings:
        print(f"warning: {w}", file=sys.stderr)
    print(
        f"-- {trace.method} on {', '.join(trace.models)}: {s.generated_tokens} tokens, "
        f"E/T {et_text(s.et_ratio, trace.method, s.rounds)}, {s.latency_s:.2f} s, {s.tokens_per_s:.2f} tok/s, "
        f"stop: {STOP_WORDS.get(s.stop_reason, s.stop_reason)}",
        file=sys.stderr,
    )
    passes = ", ".join(f"{m} {n}" for m, n in s.forward_passes.items())
    print(f"   tokens by decision: {decisions_text(s.decisions)}; forward passes: {passes}", file=sys.stderr)
    return 0


def save_outputs(args, trace) -> list[str]:
    """Write ``--out`` and ``--html`` (each atomically: whole or not at all); a file that cannot be written is
    reported in one line naming it, and the other is still written. Returns the messages of the failed ones."""
    failures = []
    for path, write in ((args.out, lambda p: write_output(p, trace.to_json(indent=1))),
                        (args.html, lambda p: write_document(p, "run_document", trace))):
        if not path:
            continue
        try:
            write(path)
        except OutputError as exc:
            hint = "" if args.json else " (run with --json to print the trace instead)"
            print(f"error: {exc}{hint}", file=sys.stderr)
            failures.append(str(exc))
    return failures


def legend_line(method: str, settings: dict) -> str:
    """What the colours of the streamed text mean, for the decisions this run can produce (uncoloured: the
    drafter's own tokens, and for SpecEM every token)."""
    parts = [f"{ANSI[d]}{DECISION_WORDS[d]}\x1b[0m" for d in method_decisions(method, settings) if d in ANSI]
    return "colours: " + (", ".join(parts) if parts else "none (every token is one model's)") + "; plain: drafter only"
