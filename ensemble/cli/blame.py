"""``python -m ensemble blame DIR --qid N``: which ensemble decision changed one evaluated answer's outcome;
``--all``: every question where the method and the reference differ, recorded into the folder (resumable).

Loads the answer's models (``--runtime``: default the evaluation's own), reverts the ensemble's decisions one at a
time, earliest first, by forking with the drafter's key forced (:mod:`ensemble.evaluation.blame`), and grades each
continuation with the evaluation's extraction. ``--members`` adds the member attribution (each member alone, the
ensemble without each).
"""

from __future__ import annotations

import argparse
import json
import sys

from ..evaluation.blame import DEFAULT_MAX_FORKS, KINDS
from .options import add_runtime_option


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("out", help="an evaluation folder (evaluate --out DIR) that kept traces")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--qid", type=int, help="the question number (the grid's first column)")
    which.add_argument("--all", action="store_true",
                       help="every question where the method and the reference differ in correctness; the results are "
                            "appended to DIR/blame.jsonl (rerun the same command to continue a cut batch)")
    p.add_argument("--method", default=None,
                   help="the ensemble's method label in the evaluation (default: its first ensemble); with --all a "
                        "comma-separated list")
    p.add_argument("--reference", default=None, help="the method to compare with (default: the drafter alone, e.g. single:qwen)")
    p.add_argument("--max-forks", type=int, default=DEFAULT_MAX_FORKS,
                   help=f"the most decisions reverted per answer, earliest first (default {DEFAULT_MAX_FORKS})")
    p.add_argument("--first", default="", metavar="QIDS", help="with --all: these questions first (comma-separated)")
    p.add_argument("--members", action="store_true",
                   help="also re-run the question with each member alone and the ensemble without each member")
    p.add_argument("--save", action="store_true",
                   help="with --qid: also record the attribution in DIR/blame.jsonl (the Results tab shows it)")
    p.add_argument("--json", action="store_true", help="print the attribution as JSON")
    p.add_argument("--device", default="cpu", help="cpu | cuda:N | auto")
    add_runtime_option(p)
    p.set_defaults(func=cmd_blame)


def _pool(args, folder):
    from ..models import ModelPool
    from ..models.device import resolve_device

    resolve_device(args.device)
    runtime = args.runtime if args.runtime != "auto" else (folder.meta.get("arguments") or {}).get("runtime") or "auto"
    return ModelPool(device=args.device, runtime=runtime if isinstance(runtime, str) else None)


def cmd_blame(args) -> int:
    from ..errors import InputError
    from ..evaluation.blame import blame_answer, model_forks
    from ..evaluation.blame_store import run_batch
    from ..evaluation.explorer import open_folder

    if args.max_forks < 1:
        raise InputError("--max-forks must be at least 1.")
    folder = open_folder(args.out)

    def say(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    if args.all:
        methods = [m.strip() for m in (args.method or ",".join(folder.ensembles())).split(",") if m.strip()]
        first = [int(q) for q in args.first.split(",") if q.strip().isdigit()]
        if first:
            folder.question_ids = [q for q in first if q in folder.question_ids] + [q for q in folder.question_ids if q not in first]
        made = run_batch(folder, methods, args.reference, model_forks(_pool(args, folder)), args.max_forks, say)
        if args.json:
            print(json.dumps([b.to_dict() for b in made], ensure_ascii=False))
        return 0
    pool = _pool(args, folder)
    forked = {}
    blame = blame_answer(folder, args.qid, model_forks(pool), args.method, args.reference, args.max_forks,
                         keep=lambda index, trace: forked.update({index: trace}),
                         progress=lambda i, k, e: say(f"decision {i}/{k}: token #{e['index']} ({KINDS[e['kind']]}) "
                                                      f"reverted -> {e['prediction']}{' (flips the outcome)' if e['flipped'] else ''}"))
    if args.save:
        from ..evaluation.blame_store import record

        record(folder.path, blame, forked.get(blame.decisive))
    members = None
    if args.members:
        from ..evaluation.blame_members import member_attribution

        members = member_attribution(folder, args.qid, blame.method, pool=pool, say=say)
    if args.json:
        print(json.dumps({**blame.to_dict(), "members": members}, ensure_ascii=False, indent=1))
        return 0
    print(blame.summary())
    for e in blame.tried:
        verdict = "DECISIVE" if e["flipped"] else "not decisive"
        print(f"  token #{e['index']:>4} {KINDS[e['kind']]:<18} {e['draft']!r} -> {e['chosen']!r} (carried by "
              f"{e['carried_by'] or 'the fused vote'}): reverted, answers {e['prediction']} — {verdict}")
    for index in blame.untried():
        print(f"  token #{index:>4} not tried (--max-forks {blame.max_forks})")
    if members:
        print("Members:")
        for m in members:
            print(f"  {m['label']}: answers {m['prediction']} ({'right' if m['correct'] else 'wrong'}){m.get('note', '')}")
    return 0
