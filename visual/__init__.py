"""Ensemble Lens visualisation: traces in, HTML strings, plotly figures and pandas tables out.

Never touches a model: the only engine imports are :mod:`ensemble.trace` and :mod:`ensemble.tokens.key_table`. Every
string from a trace reaches HTML through :func:`visual.escape.safe` (model output is untrusted).
"""

from . import escape, forks
from .blame import BLAME_CSS
from .charts import charts_note, fusion_figure, topk_figure
from .escape import error_html, safe, status_html, whitespace
from .explorer import EXPLORER_CSS
from .export import compare_document, fork_document, run_document, tokenizers_document
from .forks import fork_html, whatif_html
from .inspector import explain, inspector_json
from .plaintext import explain_text
from .report import report_document, results_figures, results_html, write_report
from .specem import rounds_html, score_heatmap, weights_figure, weights_note
from .splits import tokenization_html
from .stats import compare_figure, compare_frame, stats_frame, stats_html, token_filter_choices, token_frame, tokens_csv
from .strip import (
    StripBuilder,
    compare_html,
    compare_label,
    draft_html,
    first_divergence,
    kept_html,
    records_drawn,
    strip_html,
    token_groups,
    trace_legend,
)
from .style import CSS as _BASE_CSS
from .style import DECISION_LABELS, legend_html
from .tokenizers import MISMATCH_EXPLAINER, tokenizer_counts_frame, tokenizers_html

CSS = _BASE_CSS + EXPLORER_CSS + BLAME_CSS
"""The app's stylesheet: the views' (:mod:`visual.style`) and the evaluation explorer's."""

__all__ = [
    "CSS",
    "DECISION_LABELS",
    "MISMATCH_EXPLAINER",
    "StripBuilder",
    "charts_note",
    "compare_document",
    "compare_figure",
    "compare_frame",
    "compare_html",
    "compare_label",
    "draft_html",
    "error_html",
    "escape",
    "explain",
    "explain_text",
    "first_divergence",
    "fork_document",
    "fork_html",
    "forks",
    "fusion_figure",
    "inspector_json",
    "kept_html",
    "legend_html",
    "records_drawn",
    "report_document",
    "results_figures",
    "results_html",
    "rounds_html",
    "run_document",
    "safe",
    "score_heatmap",
    "stats_frame",
    "stats_html",
    "status_html",
    "strip_html",
    "token_filter_choices",
    "token_frame",
    "token_groups",
    "tokenization_html",
    "tokenizer_counts_frame",
    "tokenizers_document",
    "tokenizers_html",
    "tokens_csv",
    "topk_figure",
    "trace_legend",
    "weights_figure",
    "weights_note",
    "whatif_html",
    "whitespace",
    "write_report",
]
