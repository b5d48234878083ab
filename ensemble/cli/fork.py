"""``python -m ensemble fork TRACE.json --at N --method M``: continue a saved run from its token N another way;
``--force KEY`` puts that key at token N ("What if it had chosen this?") and lets the run's own method go on.

Loads the trace's models (``--runtime`` as for generate), runs the fork (:mod:`ensemble.fork`), prints both
continuations and where they part, and saves the fork's trace with ``--out`` (it opens in the app's Trace tab).
"""

from __future__ import annotations

import argparse
import json
import sys

from ..capabilities import is_one_model
from ..errors import TraceFormatError
from ..files import check_distinct_outputs, check_output_file, write_output
from ..fork import DRAFTER_ALONE, FORK_METHODS
from ..models.device import resolve_device
from .common import read_bytes, write_document
from .options import add_runtime_option


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("trace", help="a trace JSON file (generate --out, the app's Trace tab export)")
    p.add_argument("--at", type=int, required=True, help="the token number to re-decide (0 = the whole answer)")
    p.add_argument("--method", default=None, choices=FORK_METHODS,
                   help=f"{DRAFTER_ALONE}: the run's drafter alone (default); or any method on the run's models "
                        "(with --force: the run's own method)")
    p.add_argument("--force", default=None, metavar="KEY",
                   help="the key to put at token N instead of the run's, as its exact text (e.g. ' F'; any model's "
                        "top-k key); the method then continues from it")
    p.add_argument("--max-new-tokens", type=int, default=None,
                   help="the fork's token budget (default: what the run had left at the fork)")
    p.add_argument("--out", default=None, help="save the fork's trace JSON here")
    p.add_argument("--html", default=None, metavar="PATH", help="save the fork as one self-contained HTML file")
    p.add_argument("--json", action="store_true", help="print the fork's trace and the comparison as JSON")
    p.add_argument("--device", default="cpu", help="cpu | cuda:N | auto")
    add_runtime_option(p)
    p.set_defaults(func=cmd_fork)


def cmd_fork(args) -> int:
    from ..fork import complete_fork, fork_request
    from ..models import ModelPool
    from ..trace import RunTrace

    try:
        trace = RunTrace.from_json(read_bytes(args.trace))
    except TraceFormatError as exc:
        raise TraceFormatError(f"{args.trace}: {str(exc).rstrip('.')}. Give a trace saved by `generate --out FILE.json` or the app's "
                               "download.") from exc
    request = fork_request(trace, args.at, args.method, args.force, max_new_tokens=args.max_new_tokens)
    at, method, names = request.fork["at"], request.method, request.names
    resolve_device(args.device)
    check_distinct_outputs(out=args.out, html=args.html)
    for path in (args.out, args.html):
        if path:
            check_output_file(path)
    pool = ModelPool(device=args.device, runtime=args.runtime)
    forked, comparison = complete_fork(request, pool.get_many(names), trace)
    if args.json:  # printed before the files are written: a file that fails does not lose the run
        print(json.dumps({"fork": forked.to_dict(), "comparison": comparison.to_dict()}, ensure_ascii=False), flush=True)
    if args.out:
        write_output(args.out, forked.to_json(indent=1))
    if args.html:
        write_document(args.html, "fork_document", trace, forked, comparison.to_dict())
    if args.json:
        return 0
    label = f"{names[0]} alone" if is_one_model(method) else f"{method} on {', '.join(forked.models)}"
    print(f"-- kept ({len(comparison.kept)} characters, tokens #0–#{at - 1} of {trace.method}):", file=sys.stderr)
    print(comparison.kept)
    print(f"-- the run ({trace.method}) went on:", file=sys.stderr)
    print(comparison.original)
    forced = f" from the forced key {request.force!r}" if request.force else ""
    print(f"-- the fork ({label}) went on{forced}:", file=sys.stderr)
    print(comparison.forked)
    if comparison.divergence is None:
        print("-- identical continuations", file=sys.stderr)
    else:
        where = comparison.original[: comparison.divergence]
        print(f"-- they part after {comparison.divergence} characters ({where[-40:]!r}|…); word changes:", file=sys.stderr)
        for op, a, b in comparison.diff:
            if op != "equal":
                print(f"   {op}: {a!r} -> {b!r}", file=sys.stderr)
    for w in forked.warnings:
        print(f"warning: {w}", file=sys.stderr)
    return 0
