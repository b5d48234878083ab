"""The summary files people read: ``summary.csv``, ``summary.md`` and the header of ``report.html`` (the HTML
itself is drawn by ``visual``, which the command line calls: the engine never imports it)."""

from __future__ import annotations

import csv
import os
from pathlib import Path

from ..files import atomic_output, write_output
from .data import INSTRUCTION
from .summary import SUMMARY_FIELDS, segment_summary


def write_summary(out: str | os.PathLike, summary: list[dict], meta: dict, rows: list[dict] | None = None) -> None:
    """``summary.csv`` (machine-readable, see :func:`load_summary`) and ``summary.md`` (for people; with the rows,
    also a table of segment wins and final weights for SpecEM)."""
    out = Path(out)
    with atomic_output(out / "summary.csv", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=SUMMARY_FIELDS)
        writer.writeheader()
        writer.writerows(summary)
    write_output(out / "summary.md", summary_markdown(summary, meta, segment_summary(rows or [])))


def summary_markdown(summary: list[dict], meta: dict, segments: dict[str, dict] | None = None) -> str:
    s = meta.get("settings", {})
    lines = [
        f"# Evaluation: {Path(meta.get('data', {}).get('path', 'data')).name}, {meta.get('selected', '?')} questions",
        "",
        *_scope_lines(meta),
        f"- models: {', '.join(meta.get('models', []))}",
        f"- max_new_tokens {s.get('max_new_tokens')}, temperature {s.get('temperature')}, seed {meta.get('seed')}, "
        f"limit {meta.get('limit')}",
        f"- instruction appended to each question: \"{meta.get('instruction', INSTRUCTION)}\"",
        f"- command: `{meta.get('command', '')}`",
        "",
        "| method | n | correct | accuracy (95% Wilson CI) | mean E/T | tokens/s | s/question | corrupted | phrase loops "
        "| budget reached | mean tokens |",
        "|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in summary:
        lines.append(
            f"| {r['method']} | {r['n']} | {r['correct']} | {100 * r['accuracy']:.1f}% "
            f"({100 * r['ci_low']:.1f}–{100 * r['ci_high']:.1f}%) | {r['mean_et']:.3f} | {r['tokens_per_s']:.2f} | "
            f"{r['s_per_question']:.2f} | {100 * r['corruption_rate']:.1f}% | {100 * r['loop_rate']:.1f}% | "
            f"{100 * r['budget_rate']:.1f}% | {r['mean_tokens']:.1f} |"
        )
    if not summary:
        lines.append("| (no results yet) | | | | | | | | | | |")
    drafting = [r for r in summary if r.get("replaced_per_100") or r.get("discarded_per_100")]
    if drafting:
        lines += ["", "Drafting (SAFE): replaced and discarded draft tokens per 100 generated tokens.", "",
                  "| method | replacements / 100 tokens | discarded drafts / 100 tokens |", "|---|---:|---:|"]
        lines += [f"| {r['method']} | {r['replaced_per_100']:.2f} | {r['discarded_per_100']:.2f} |" for r in drafting]
    if segments:
        lines += ["", "Segment ensembles: segments each model's draft won, and its Hedge weight after the last round "
                  "(mean over questions; equal weights at the start).", "",
                  "| method | questions | model | segments won | mean final weight |", "|---|---:|---|---:|---:|"]
        for method, entry in segments.items():
            for name, weight in entry["mean_final_weight"].items():
                lines.append(f"| {method} | {entry['questions']} | {name} | {entry['wins'].get(name, 0)} | {weight:.3f} |")
    return "\n".join(lines) + "\n"


def _scope_lines(meta: dict) -> list[str]:
    shared, selected = meta.get("summarized_questions"), meta.get("selected")
    if shared is None or shared == selected:
        return []
    return [
        f"**Incomplete run: the table covers the {shared} of {selected} questions that every method has finished** "
        "(rerun the command to continue).",
        "",
    ]


def report_meta(meta: dict) -> dict:
    """The header of report.html: what a reader needs to reproduce the numbers (meta.json has everything)."""
    settings = meta.get("settings", {})
    machine = meta.get("machine", {})
    shown = ("max_new_tokens", "temperature", "top_k", "lookahead", "segment_len", "eta", "sharpen", "sharpen_scope", "gac_gate",
             "after_kept", "unite_missing")
    return {
        "command": meta.get("command", ""),
        "data": f"{meta.get('data', {}).get('path', '')} (sha256 {meta.get('data', {}).get('sha256', '')[:12]}…)",
        "questions": f"{meta.get('selected')} of {meta.get('data', {}).get('questions')} (limit {meta.get('limit')}, seed {meta.get('seed')})"
        + (f"; summarized: the {meta['summarized_questions']} every method finished"
           if meta.get("summarized_questions") not in (None, meta.get("selected")) else ""),
        "models": ", ".join(meta.get("models", [])),
        "methods": ", ".join(meta.get("methods", [])),
        "settings": ", ".join(f"{k} {settings.get(k)}" for k in shown if k in settings),
        "instruction": meta.get("instruction", ""),
        "machine": f"{machine.get('platform')}, {machine.get('cpu_count')} CPUs, {machine.get('torch_threads')} torch threads"
        + (f", {machine['cuda']}" if machine.get("cuda") else ""),
        "device / dtype": f"{meta.get('device')} / {meta.get('dtype')}",
        "dates": f"created {meta.get('created')}, finished {meta.get('finished')}",
    }
