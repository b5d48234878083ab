"""``python -m ensemble report``: rebuild an evaluation folder's summary, and the ``report.html`` that the
command line draws with ``visual`` for ``evaluate`` and ``report`` alike (the engine never imports it)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from ..evaluation import rebuild_report, report_meta
from ..files import write_output


def write_html_report(out: str | os.PathLike, summary: list[dict], meta: dict, pages: str = "none") -> bool:
    """``report.html`` through the visual layer; False (with a warning) when that layer is not installed."""
    try:
        from visual import report_document
    except ImportError as exc:
        print(f"warning: report.html not written: the visual package is not available ({exc}).", file=sys.stderr)
        return False
    from visual.evalreport import explorer_sections

    from ..evaluation.blame_store import blame_table
    from ..evaluation.decision_stats import decision_stats
    from ..evaluation.explorer import FILTERS, SORTS, filter_questions, open_folder

    title = f"Ensemble Lens evaluation: {Path(meta.get('data', {}).get('path', 'data')).name}, {meta.get('selected', '?')} questions"
    folder = open_folder(out)
    views = {f"{k}|{e}|{s}": filter_questions(folder, k, e or None, s)
             for k in FILTERS for e in (folder.ensembles() or [""]) for s in SORTS}
    paged = set(folder.question_ids if pages == "all" else filter_questions(folder, "disagree") if pages == "disagree" else [])
    extra, figures = explorer_sections(folder, decision_stats(folder), views, FILTERS, SORTS, out, paged, blame_table(folder))
    write_output(Path(out) / "report.html", report_document([dict(r) for r in summary], title, report_meta(meta), extra, figures))
    return True


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("out", help="an evaluation folder (holding meta.json and rows.jsonl)")
    p.add_argument("--answer-pages", choices=("none", "disagree", "all"), default="none",
                   help="which traced answers also get their own page (strip and inspector, 0.4-0.5 MB per 64 tokens) "
                        "under DIR/answers/, linked from report.html's grid: none (default), those of the questions where "
                        "the methods disagree, or all")
    p.set_defaults(func=cmd_report)


def print_summary(out: str | os.PathLike) -> int:
    """Print the summary.md that the evaluation has just written (it has the segment table, which needs the
    rows, so the summary rows alone cannot rebuild it)."""
    print((Path(out) / "summary.md").read_text(encoding="utf-8"), end="")
    return 0


def cmd_report(args) -> int:
    rebuild_report(args.out, write_html=lambda out, summary, meta: write_html_report(out, summary, meta, args.answer_pages))
    return print_summary(args.out)
