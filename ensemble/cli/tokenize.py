"""``python -m ensemble tokenize``: how each model splits a text, and where their boundaries agree."""

from __future__ import annotations

import argparse
import json

from ..errors import SettingsError
from ..files import check_output_file
from ..models import DEFAULT_MODELS
from ..trace.readable import caret_lines
from .common import models_arg, read_text, write_document


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("text", nargs="?")
    p.add_argument("--file", default=None, help="read the text from a file")
    p.add_argument("--models", default=",".join(DEFAULT_MODELS))
    p.add_argument("--json", action="store_true")
    p.add_argument("--html", default=None, metavar="PATH", help="also save the aligned view as one self-contained HTML file")
    p.add_argument("--ids", action="store_true",
                   help="show each token's id (and in the HTML view, byte tokens as their own boxes)")
    p.set_defaults(func=cmd_tokenize)


def cmd_tokenize(args) -> int:
    from ..models import ModelPool
    from ..tokens.align import compare

    text = read_text(args.file, "surrogateescape") if args.file else args.text  # stray bytes stay visible
    if text is None:
        raise SettingsError("Give the text to tokenize, or --file PATH.")
    if args.html:
        check_output_file(args.html)
    pool = ModelPool()
    tables = {name: pool.keys(name) for name in models_arg(args.models)}
    result = compare(text, tables)
    if args.html:
        write_document(args.html, "tokenizers_document", result, args.ids)
    if args.json:
        out = {k: result[k] for k in ("text", "models", "shared_boundaries", "agreement", "all_boundaries", "segments", "notes")}
        print(json.dumps(out, ensure_ascii=False))
        return 0
    for note in result["notes"]:
        print(f"note: {note}")
    width = max(len(n) for n in result["models"])
    for name, info in result["models"].items():
        shown = "|".join(t["text"].replace("\n", "↵") + (f"({t['id']})" if args.ids else "") for t in info["tokens"][:200])
        more = " …" if info["count"] > 200 else ""
        print(f"{name:<{width}}  {info['count']:>5} tokens  {shown}{more}")
    interior = [b for b in result["shared_boundaries"] if 0 < b < len(result["text"])]
    print(f"shared boundaries: {len(interior)} of {len(result['all_boundaries']) - 2} interior; agreement {result['agreement']:.1f}%")
    missing = {name: list(info["missing"]) for name, info in result["models"].items() if info["missing"]}
    if missing:
        print("^ : a token edge this model lacks where another model has one")
        for line in caret_lines(result["text"], missing):
            print(line)
    return 0
