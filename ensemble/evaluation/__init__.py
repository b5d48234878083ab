"""``python -m ensemble evaluate``: accuracy, speed and E/T of methods on GSM8K-style questions.

One run evaluates a deterministic subset of the questions (chosen by ``--seed``) with every method, the
methods of one question back to back, and appends one row per (question, method) to ``rows.jsonl`` as soon
as it finishes. Re-running the same command resumes: rows already there are skipped, and a command whose
settings would mix incomparable results into the folder is refused (``meta.json`` holds what was used).

- :mod:`.specs`: the ``--methods`` entries and the run's :class:`EvalConfig`;
- :mod:`.data`: the questions and the prompt; :mod:`.scoring`: a run as a result row, with its flags;
- :mod:`.summary`: rows to one summary row per method; :mod:`.report`: ``summary.csv`` / ``summary.md``;
- :mod:`.store`: the folder on disk (rows, meta, lock); :mod:`.runner`: the loop that fills it.

The package draws nothing: ``report.html`` is written by the command line (:mod:`ensemble.cli.report`),
which passes its writer as ``write_html``.

Python API (no model loading by name needed)::

    config = EvalConfig(data="q.jsonl", methods=parse_methods("single:qwen,safe-unite"),
                        models=["qwen", "gemma3"], out="runs/a", settings=Settings(max_new_tokens=256))
    summary = run_evaluation(config, {"qwen": qwen, "gemma3": gemma3})   # LoadedModel objects
"""

from ..errors import EvaluationError
from .data import GSM8K_TEST, INSTRUCTION, Question, build_prompt, load_questions, select_held_out, select_questions, shown_path
from .report import report_meta, summary_markdown, write_summary
from .runner import machine_info, rebuild_report, run_evaluation
from .scoring import ROW_FIELDS, is_corrupted, is_looping, make_row
from .specs import ENSEMBLE_SPECS, SPEC_HELP, EvalConfig, MethodSpec, parse_methods
from .store import check_compatible, read_rows, write_rows_csv
from .summary import SUMMARY_FIELDS, load_summary, paired_questions, segment_summary, summarize, wilson_interval

__all__ = [
    "ENSEMBLE_SPECS",
    "GSM8K_TEST",
    "INSTRUCTION",
    "ROW_FIELDS",
    "SPEC_HELP",
    "SUMMARY_FIELDS",
    "EvalConfig",
    "EvaluationError",
    "MethodSpec",
    "Question",
    "build_prompt",
    "check_compatible",
    "is_corrupted",
    "is_looping",
    "load_questions",
    "load_summary",
    "machine_info",
    "make_row",
    "paired_questions",
    "parse_methods",
    "read_rows",
    "rebuild_report",
    "report_meta",
    "run_evaluation",
    "segment_summary",
    "select_held_out",
    "select_questions",
    "shown_path",
    "summarize",
    "summary_markdown",
    "wilson_interval",
    "write_rows_csv",
    "write_summary",
]
