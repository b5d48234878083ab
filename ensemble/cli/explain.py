"""``python -m ensemble explain DIR --qid N --methods A,B``: where two methods' answers to one question of an
evaluation part, and what each run decided there (from the traces ``evaluate`` keeps)."""

from __future__ import annotations

import argparse
import json


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("out", help="an evaluation folder (evaluate --out DIR) that kept traces")
    p.add_argument("--qid", type=int, required=True, help="the question number (the grid's first column)")
    p.add_argument("--methods", required=True, help="two method labels of the evaluation, e.g. single:qwen,safe-unite")
    p.add_argument("--json", action="store_true", help="print the divergence as JSON")
    p.set_defaults(func=cmd_explain)


def cmd_explain(args) -> int:
    from ..evaluation.divergence import answers_divergence
    from ..evaluation.explorer import open_folder

    folder = open_folder(args.out)
    methods = tuple(m.strip() for m in args.methods.split(",") if m.strip())
    div = answers_divergence(folder, args.qid, methods)
    if args.json:
        print(json.dumps(div.to_dict(), ensure_ascii=False, indent=1))
        return 0
    import visual

    print(f"Question {args.qid}: {folder.question(args.qid)}")
    for label, trace in zip(div.labels, div.traces):
        row = folder.row(args.qid, label) or {}
        verdict = "right" if row.get("correct") else "wrong"
        print(f"\n== {label} ({verdict}: answered {row.get('prediction')}, gold {row.get('gold')}) ==")
        if div.at is None:
            print(trace.text)
        else:
            print(trace.text[: div.at] + "‖" + trace.text[div.at :])
    print()
    print("\n".join(div.lines()))
    for label, trace, index in zip(div.labels, div.traces, div.indices):
        if index is not None and div.at is not None:
            print(f"\n-- {label}, token #{index} --")
            print(visual.explain_text(trace, index))
    if div.at is not None:
        print("\n(‖ marks where the answers part.)")
    return 0
