"""One builder per tab of the app. Each lays its tab out and returns its components in a dataclass, named as
the fields of the views in :mod:`ui.view_tuples` that fill them. The element ids are what the browser tests use."""

from __future__ import annotations

from dataclasses import dataclass

import gradio as gr

import visual
from ensemble.capabilities import verifies_drafter
from ensemble.models import DEFAULT_ENSEMBLE, DEFAULT_MODELS
from ensemble.models.runtimes import runtime_label

from . import png
from .controls import engine_controls
from .files import project_file

METHOD_CHOICES = [
    ("Single model", "single"),
    ("UniTE (fuse every token)", "unite"),
    ("GaC (fuse every token)", "gac"),
    ("SAFE (fuse only where safe)", "safe"),
    ("SpecEM (segments + weights)", "specem"),
]
FORK_CHOICES = [
    ("The drafter alone", "drafter"),
    ("UniTE", "unite"),
    ("GaC", "gac"),
    ("SAFE", "safe"),
    ("SpecEM", "specem"),
]
FORK_HINT = ("**What if?** Click a token, then continue the answer from that token with the drafter alone or another "
             "method (same models and settings): both continuations appear side by side, where they part marked.")
INTRO = """# 🔍 Ensemble Lens
Run several small language models **as one ensemble** and see, token by token, why the ensemble did what it
did: where **SAFE** fused their distributions, where a **tokenizer mismatch** made fusing unsafe, where the
models already agreed, and how **SpecEM** weighs whole segments. Click any token for the reason."""

FIRST_VIEW = project_file("assets/first-view.json")
"""A recorded run of the first example at the app's defaults, replayed on load (scripts/record_first_view.py)."""
THREE, PAIR = list(DEFAULT_MODELS), list(DEFAULT_ENSEMBLE)
EXAMPLES = [
    ["Sofia went to Plovdiv in 1999. Where did Sofia go, and when? Answer in one sentence.", "safe", THREE],
    [
        "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. "
        "How many clips did Natalia sell altogether in April and May? Write the calculation and the total in one sentence.",
        "safe",
        PAIR,
    ],
    ["What is 1234 + 5678? Write the digits of the result one by one.", "unite", THREE],
    ["Write a Python function that checks whether a string is a palindrome.", "specem", THREE],
    ["Translate 'good morning, my friend' into Bulgarian, Chinese and Japanese.", "gac", THREE],
]
"""Prompt, method and models of each example. The math example runs on the default ensemble (measured best on
GSM8K, ``DEFAULT_ENSEMBLE``); the others on all three embedded models, whose three tokenizers are their lesson
(gemma3 holds "Sofia" whole where qwen and smollm2 split it). The app opens on the first example."""
EXAMPLE_LABELS = ["Names: Sofia in Plovdiv (SAFE)", "Math: Natalia's clips (SAFE)", "Digits: 1234 + 5678 (UniTE)",
                  "Code: a palindrome check (SpecEM)", "Other languages: good morning (GaC)"]
FILLED = "el-when-filled"
"""An output box (a file to download, a chart) shown only once it holds something (a rule in visual.style): no empty
boxes before anything runs."""
CHARTS_HINT = '<p class="el-muted">Click a token: each model\'s top choices and the fused distribution appear here.</p>'
COMPARE_HINT = '<p class="el-muted">Click a token in a card to see why.</p>'
"""The Compare tab's inspector before a token is clicked (and again when a new comparison starts)."""
SCROLL_TO_STRIP_JS = """() => {
  let tries = 0;
  const bring = () => {
    const status = document.getElementById('status'), box = status?.getBoundingClientRect();
    if (!box || box.height === 0) {  // its tab is not drawn yet (a Results cell switches to the Run tab): wait
      if (++tries < 30) setTimeout(bring, 100);
      return;
    }
    if (box.top < 0 || box.top > window.innerHeight - 160) status.scrollIntoView({behavior: 'smooth', block: 'start'});
  };
  bring();
}"""
"""Run (button or Enter) and an answer opened from the Results grid bring the status line and the strip below it into
view where they are not (on a phone the result sits above the form; beside it on a wider screen, where nothing needs
to move; the grid may have been scrolled far down)."""
STATUS_JS = f"""
const bring = {SCROLL_TO_STRIP_JS};
document.addEventListener('click', (event) => {{
  if (event.target.closest('#run-button')) setTimeout(bring, 50);
}});
document.addEventListener('keydown', (event) => {{
  if (event.key === 'Enter' && !event.shiftKey && event.target.closest('#prompt')) setTimeout(bring, 50);
}});
"""
"""Listens for Run from the status line's own script (an event with only ``js`` did not run on the click here)."""
PROJECTOR_JS = """(on) => {
  (document.querySelector('.gradio-container') || document.body).classList.toggle('el-large', on);
  return on;
}"""
"""The large-text switch: ``el-large`` on the app's container (Gradio scopes the app's CSS inside it)."""
TOKENIZER_EXAMPLES = [
    ["Sofia went to Plovdiv in 1999."],
    ["3.14159 × 2 = 6.28318; 1,000,000 and 0.5%"],
    ["I ❤️ Bulgaria 🇧🇬 and coding 👩‍💻 at 3am"],
    ["我们明天去普罗夫迪夫。東京は大きい。"],
    ["def square(x):\n    return x ** 2  # tabs\tand  spaces"],
]
# The strip's tokens carry data-i; a click passes that index to the Python handler (``gr.EventData.index``), and a
# running count (``seq``) so that the handler can drop an answer a newer click has overtaken.
STRIP_JS = """
let seq = 0;
element.addEventListener('click', (event) => {
  const token = event.target.closest('[data-i]');
  if (!token) return;
  element.querySelectorAll('.el-selected').forEach((t) => t.classList.remove('el-selected'));
  token.classList.add('el-selected');
  history.replaceState(null, '', location.pathname + location.search + '#t=' + token.dataset.i);  // a link to it
  trigger('click', {index: parseInt(token.dataset.i, 10), seq: ++seq});
  // the explanation is drawn under the strip: where that is below the screen (a phone), scroll just enough to show
  // its first 300 px, keeping the clicked token in sight
  const below = (document.getElementById('explanation')?.getBoundingClientRect().top ?? 0) - window.innerHeight + 300;
  const by = Math.min(below, token.getBoundingClientRect().top - 60);
  if (by > 0) window.scrollBy({top: by, behavior: 'smooth'});
});
"""

# A key clicked under the top-k panels: its exact text (``data-key``) to the fork handler, and the fork view in sight.
WHATIF_JS = """
element.addEventListener('click', (event) => {
  const key = event.target.closest('[data-key]');
  if (!key) return;
  trigger('click', {key: key.dataset.key});
  document.getElementById('fork-box')?.scrollIntoView({behavior: 'smooth', block: 'start'});
});
"""

# A token clicked in a Compare card: its index and the card's run (``data-run``), for the inspector.
COMPARE_JS = """
let seq = 0;
element.addEventListener('click', (event) => {
  const token = event.target.closest('[data-i]');
  const card = event.target.closest('[data-run]');
  if (!token || !card) return;
  element.querySelectorAll('.el-selected').forEach((t) => t.classList.remove('el-selected'));
  token.classList.add('el-selected');
  trigger('click', {index: parseInt(token.dataset.i, 10), run: card.dataset.run, seq: ++seq});
});
"""


@dataclass
class RunTab:
    prompt: gr.Textbox
    method: gr.Radio
    model_box: gr.CheckboxGroup
    drafter: gr.Dropdown
    runtime: gr.Radio
    controls: dict[str, gr.components.Component]  # the engine settings, by setting name
    examples_box: gr.Accordion
    examples: gr.Dataset
    run_button: gr.Button
    stop_button: gr.Button
    link_button: gr.Button
    link_box: gr.Textbox
    status: gr.HTML
    legend: gr.HTML
    strip: gr.HTML
    explanation: gr.HTML
    tokenization: gr.HTML
    charts_hint: gr.HTML
    topk_plot: gr.Plot
    fusion_plot: gr.Plot
    record_json: gr.JSON
    fork_method: gr.Radio
    fork_button: gr.Button
    fork_view: gr.HTML
    specem_view: gr.Column
    rounds: gr.HTML
    round_slider: gr.Slider
    heatmap: gr.Plot
    weights_plot: gr.Plot
    weights_note: gr.HTML
    stats: gr.HTML
    token_table: gr.Dataframe
    token_filter: gr.Dropdown
    whatif: gr.HTML  # "What if it had chosen this?": the top-k keys as buttons; a click forks with that key forced
    strip_count: gr.Number | None = None  # filled by STRIP_COUNT_JS as Stop is clicked


STRIP_COUNT_JS = "(shown) => document.querySelectorAll('#strip .el-tok').length"
"""Run before Stop's handler, in the browser: how many tokens the strip holds at the click (the run keeps those)."""

RUNTIME_INFO = ("What computes the models: transformers (float weights, any model) or llama.cpp (the GGUF files as "
                "shipped, faster on a CPU); auto picks llama.cpp for the embedded models on a CPU.")


def build_run_tab(model_choices: list[str], runtimes: list[str] = ("auto",), runtime: str = "auto") -> RunTab:
    """The Run tab, opened on the first example (its prompt, method and models: what the first view recorded)."""
    first_prompt, first_method, first_models = EXAMPLES[0]
    method = gr.Radio(METHOD_CHOICES, value=first_method, label="Method", elem_id="method", render=False)
    model_box = gr.CheckboxGroup(model_choices, value=first_models, label="Models", elem_id="models", render=False)
    # The form and the result side by side on a laptop (the strip and its status in the first screen, at once and
    # while a run streams); on a phone the result comes first (the ``run-output`` rule in visual.style).
    with gr.Row(elem_id="run-main", equal_height=False):
        with gr.Column(scale=2, min_width=300, elem_id="run-form"):
            prompt = gr.Textbox(label="Prompt", lines=3, max_lines=12, placeholder="Ask something…", elem_id="prompt",
                                value=first_prompt)
            with gr.Row():
                run_button = gr.Button("Run", variant="primary", elem_id="run-button", scale=2)
                stop_button = gr.Button("Stop", variant="secondary", elem_id="stop-button", scale=1, interactive=False)
                strip_count = gr.Number(value=0, visible=False, precision=0, elem_id="strip-count")
                link_button = gr.Button("🔗 Copy link", elem_id="link-button", scale=1, min_width=130)
            link_box = gr.Textbox(label="Link to this prompt, method, models, settings and token (copied)", visible=False,
                                  interactive=False, elem_id="link-box", buttons=["copy"])
            with gr.Accordion("Examples (click one to fill the form)", open=True, elem_id="examples") as examples_box:
                examples = gr.Examples(EXAMPLES, inputs=[prompt, method, model_box], cache_examples=False, example_labels=EXAMPLE_LABELS,
                                       label="Names, numbers, math, code, other languages")
            method.render()
            with gr.Row():
                model_box.render()
                drafter = gr.Dropdown(first_models, value=first_models[0], label="SAFE drafter", elem_id="drafter")  # SAFE only
            with gr.Accordion("Engine settings", open=False):
                runtime_radio = gr.Radio([(runtime_label(r), r) for r in runtimes], value=runtime, label="Runtime",
                                         info=RUNTIME_INFO, elem_id="runtime")
                controls = engine_controls()
        with gr.Column(scale=3, min_width=300, elem_id="run-output"):
            status = gr.HTML(elem_id="status", js_on_load=STATUS_JS)  # HTML built by visual.status_html: Markdown would fetch ![x](url)
            legend = gr.HTML(elem_id="legend")
            strip = gr.HTML(value="", elem_id="strip", elem_classes=["el-strip"], js_on_load=STRIP_JS)
            # the reason right under the strip: the first view's (its first blocked token, selected on load) and a
            # click's are in the first screen on a 1366x768 laptop and begin in it on a 390x844 phone
            explanation = gr.HTML(elem_id="explanation")
            with gr.Row():
                strip_png = gr.Button("Save the strip as PNG", size="sm", elem_id="strip-png", scale=0, min_width=180)
            strip_png.click(None, js=png.STRIP_PNG_JS)  # drawn in the browser: nothing to send to the server
            gr.HTML('<p class="el-muted el-keys">Keys: ← → step through the tokens, n / p jump to the next / previous '
                    "blocked or replaced token.</p>")
    with gr.Row():
        with gr.Column(scale=1):
            tokenization = gr.HTML(elem_id="tokenization")
        with gr.Column(scale=1):
            charts_hint = gr.HTML(CHARTS_HINT, elem_id="charts-hint")  # until a token is selected, and why no fusion
            topk_plot = gr.Plot(label="Each model's top-k", elem_id="topk-plot", visible=False)
            whatif = gr.HTML(elem_id="whatif", js_on_load=WHATIF_JS)  # under the top-k panels (visual.whatif_html)
            fusion_plot = gr.Plot(label="Fused distribution: before / after sharpening", elem_id="fusion-plot", visible=False)
    with gr.Accordion("Raw record (JSON)", open=False):
        record_json = gr.JSON(elem_id="record-json")
    with gr.Group(elem_id="fork-box"):
        gr.Markdown(FORK_HINT)
        with gr.Row():
            fork_method = gr.Radio(FORK_CHOICES, value="drafter", label="Continue from the selected token with",
                                   elem_id="fork-method", scale=4)
            fork_button = gr.Button("Fork from the selected token", elem_id="fork-button", scale=1)
        fork_view = gr.HTML(elem_id="fork-view")
    with gr.Column(visible=False) as specem_view:
        gr.Markdown("### SpecEM rounds")
        rounds = gr.HTML(elem_id="rounds")
        round_slider = gr.Slider(0, 1, value=0, step=1, label="Round", elem_id="round-slider")
        with gr.Row():
            heatmap = gr.Plot(label="Verifier × candidate scores", elem_id="heatmap")
            with gr.Column():
                weights_plot = gr.Plot(label="Model weights over rounds", elem_id="weights")
                weights_note = gr.HTML(elem_id="weights-note")
    stats = gr.HTML(elem_id="stats")
    with gr.Accordion("Per-token table", open=False):
        token_filter = gr.Dropdown(visual.token_filter_choices(), value="all", label="Show", elem_id="token-filter",
                                   info="only the tokens of one decision; whitespace is drawn as · ↵ →")
        token_table = gr.Dataframe(elem_id="token-table", wrap=True)
    return RunTab(prompt, method, model_box, drafter, runtime_radio, controls, examples_box, examples.dataset, run_button,
                  stop_button, link_button, link_box, status, legend, strip, explanation, tokenization, charts_hint, topk_plot, fusion_plot,
                  record_json, fork_method, fork_button, fork_view, specem_view, rounds, round_slider, heatmap, weights_plot,
                  weights_note, stats, token_table, token_filter, whatif, strip_count)


@dataclass
class TokenizerTab:
    tok_text: gr.Textbox
    tok_models: gr.CheckboxGroup
    tok_ws: gr.Checkbox
    tok_ids: gr.Checkbox
    tok_button: gr.Button
    tok_view: gr.HTML
    tok_counts: gr.Dataframe
    tok_save: gr.Button
    tok_html: gr.File
    tok_link_button: gr.Button  # a link to this text, these tokenizers and switches (ui.links.tokenizer_query)
    tok_link_box: gr.Textbox


def build_tokenizer_tab(model_choices: list[str], default_models: list[str]) -> TokenizerTab:
    gr.Markdown(visual.MISMATCH_EXPLAINER)
    with gr.Row():
        tok_text = gr.Textbox(label="Text", lines=3, value="Sofia went to Plovdiv in 1999.", elem_id="tok-text")
        with gr.Column():
            tok_models = gr.CheckboxGroup(model_choices, value=default_models, label="Tokenizers", elem_id="tok-models")
            tok_ws = gr.Checkbox(value=True, label="Show whitespace (· ↵ →)")
            tok_ids = gr.Checkbox(value=False, label="Show token ids and byte pieces", elem_id="tok-ids")
            with gr.Row():
                tok_button = gr.Button("Compare tokenizations", variant="primary", elem_id="tok-button", scale=2)
                tok_link_button = gr.Button("🔗 Copy link", elem_id="tok-link-button", scale=1)
    tok_link_box = gr.Textbox(label="Link to this text, these tokenizers and switches (copied)", visible=False,
                              interactive=False, elem_id="tok-link-box", buttons=["copy"])
    gr.Examples(TOKENIZER_EXAMPLES, inputs=[tok_text], label="Examples")
    tok_view = gr.HTML(elem_id="tok-view")
    tok_counts = gr.Dataframe(label="Token counts", elem_id="tok-counts")
    with gr.Row():
        tok_save = gr.Button("Save this view as one HTML page", elem_id="tok-save", scale=1)
        tok_png = gr.Button("Save as PNG", elem_id="tok-png", scale=1)
        tok_png.click(None, js=png.TOKENIZERS_PNG_JS)
        tok_html = gr.File(label="Aligned view (HTML, opens offline)", elem_id="tok-html", scale=3, interactive=False,
                           elem_classes=[FILLED])
    return TokenizerTab(tok_text, tok_models, tok_ws, tok_ids, tok_button, tok_view, tok_counts, tok_save, tok_html,
                        tok_link_button, tok_link_box)


@dataclass
class CompareTab:
    cmp_prompt: gr.Textbox
    cmp_methods: gr.CheckboxGroup
    cmp_models: gr.CheckboxGroup
    cmp_tokens: gr.Slider
    cmp_button: gr.Button
    cmp_stop: gr.Button
    cmp_view: gr.HTML
    cmp_table: gr.Dataframe
    cmp_plot: gr.Plot
    cmp_html: gr.File
    cmp_status: gr.HTML
    cmp_inspect: gr.HTML


def build_compare_tab(model_choices: list[str], default_models: list[str]) -> CompareTab:
    with gr.Row():
        cmp_prompt = gr.Textbox(label="Prompt", lines=2, value=EXAMPLES[1][0], elem_id="cmp-prompt")
        with gr.Column():
            cmp_methods = gr.CheckboxGroup(METHOD_CHOICES, value=["unite", "safe"], label="Methods (2-4)")
            cmp_models = gr.CheckboxGroup(model_choices, value=default_models, label="Models")
            cmp_tokens = gr.Slider(8, 512, value=64, step=4, label="Max new tokens", elem_id="cmp-tokens")
            with gr.Row():
                cmp_button = gr.Button("Compare", variant="primary", elem_id="cmp-button")
                cmp_stop = gr.Button("Stop", variant="secondary", elem_id="cmp-stop", interactive=False)
    gr.Markdown("Uses the Run tab's engine settings and SAFE drafter, with this tab's token budget.", elem_classes=["el-muted"])
    cmp_status = gr.HTML(elem_id="cmp-status")
    cmp_view = gr.HTML(elem_id="cmp-view", js_on_load=COMPARE_JS)
    cmp_inspect = gr.HTML(COMPARE_HINT, elem_id="cmp-inspect")
    cmp_table = gr.Dataframe(label="Stats (a run per column)", elem_id="cmp-table", wrap=True, pinned_columns=1)
    cmp_plot = gr.Plot(label="Latency and E/T", elem_id="cmp-plot", elem_classes=[FILLED])
    cmp_html = gr.File(label="This comparison as one page (HTML, opens offline)", elem_id="cmp-html", interactive=False,
                       elem_classes=[FILLED])
    return CompareTab(cmp_prompt, cmp_methods, cmp_models, cmp_tokens, cmp_button, cmp_stop, cmp_view, cmp_table, cmp_plot, cmp_html,
                      cmp_status, cmp_inspect)


@dataclass
class TraceTab:
    export_button: gr.Button
    json_file: gr.File
    csv_file: gr.File
    html_file: gr.File
    upload: gr.File
    trace_status: gr.HTML


def build_trace_tab() -> TraceTab:
    gr.Markdown(
        "Download the current run as a JSON trace and its per-token table as CSV, or load a JSON trace "
        "to replay every view of the Run tab without loading any model (JSON only, at most 20 MB)."
    )
    with gr.Row():
        export_button = gr.Button("Export current run", elem_id="export-button")
        json_file = gr.File(label="Trace (JSON)", elem_id="json-file", interactive=False, elem_classes=[FILLED])
        csv_file = gr.File(label="Tokens (CSV)", elem_id="csv-file", interactive=False, elem_classes=[FILLED])
        html_file = gr.File(label="Page (HTML, opens offline)", elem_id="html-file", interactive=False, elem_classes=[FILLED])
    upload = gr.File(label="Load a trace (.json, or .json.gz as evaluate keeps them)", file_types=[".json", ".gz"], type="filepath", elem_id="upload")
    trace_status = gr.HTML(elem_id="trace-status")  # what the upload did, or why the file was refused
    return TraceTab(export_button, json_file, csv_file, html_file, upload, trace_status)


@dataclass
class ResultsTab:
    results_file: gr.File
    results_ours: gr.Button
    results_view: gr.HTML
    results_plot_a: gr.Plot
    results_plot_b: gr.Plot
    explorer_box: gr.Column
    grid_filter: gr.Dropdown
    grid_ensemble: gr.Dropdown
    grid_order: gr.Dropdown
    grid: gr.HTML
    cell_note: gr.HTML
    part_qid: gr.Dropdown
    part_a: gr.Dropdown
    part_b: gr.Dropdown
    part_button: gr.Button
    part_view: gr.HTML
    stats_view: gr.HTML
    stats_plot_a: gr.Plot
    stats_plot_b: gr.Plot
    stats_plot_c: gr.Plot
    blame_view: gr.HTML
    part_blame: gr.Button
    blame_stats: gr.HTML
    blame_plot: gr.Plot


# A grid cell clicked: its question and method (``data-qid``, ``data-method``), numbered like the strip's clicks.
GRID_JS = """
let seq = 0;
element.addEventListener('click', (event) => {
  const cell = event.target.closest('[data-method]');
  if (!cell) return;
  element.querySelectorAll('.el-picked').forEach((c) => c.classList.remove('el-picked'));
  cell.classList.add('el-picked');
  // its "find the decision" button: the attribution shows under the grid; anywhere else: the answer opens
  const action = event.target.closest('[data-blame]') ? 'blame' : 'open';
  trigger('click', {qid: parseInt(cell.dataset.qid, 10), method: cell.dataset.method, action, seq: ++seq});
});
element.addEventListener('keydown', (event) => {
  if (event.key === 'Enter' && event.target.closest('[data-method]')) event.target.click();
});
"""


# "Open token #N" in an attribution: that answer's token in the Run tab, the counterfactual beside it.
OPEN_TOKEN_JS = """
let seq = 0;
element.addEventListener('click', (event) => {
  const button = event.target.closest('[data-open-token]');
  if (!button) return;
  trigger('click', {qid: parseInt(button.dataset.qid, 10), method: button.dataset.method,
                    index: parseInt(button.dataset.openToken, 10), seq: ++seq});
});
"""


def build_results_tab(have_committed_results: bool) -> ResultsTab:
    gr.Markdown("Open an evaluation written by `python -m ensemble evaluate`: this project's GSM8K run, its "
                "`summary.csv`, or the whole `--out` folder as a `.zip` (with its traces: every answer opens token by token).")
    with gr.Row(equal_height=True):
        results_ours = gr.Button("Open this project's GSM8K run", variant="primary", size="lg", elem_id="results-ours",
                                 visible=have_committed_results, scale=1, min_width=220)
        results_file = gr.File(label="summary.csv, or an evaluation folder as .zip", file_types=[".csv", ".zip"],
                               type="filepath", elem_id="results-file", scale=2, height=120)
    results_view = gr.HTML(elem_id="results-view")
    with gr.Row():
        results_plot_a = gr.Plot(label="Accuracy vs seconds per question", elem_id="results-scatter", min_width=300, elem_classes=[FILLED])
        results_plot_b = gr.Plot(label="E/T per method", elem_id="results-bars", min_width=300, elem_classes=[FILLED])
    with gr.Column(visible=False, elem_id="explorer") as explorer_box:
        gr.Markdown("### Every answer: question × method")
        with gr.Row():
            grid_filter = gr.Dropdown([], label="Show", elem_id="grid-filter", min_width=220)
            grid_ensemble = gr.Dropdown([], label="The ensemble (for the filters)", elem_id="grid-ensemble", min_width=160)
            grid_order = gr.Dropdown([], label="Order", elem_id="grid-order", min_width=160)
        grid = gr.HTML(elem_id="grid", js_on_load=GRID_JS)
        cell_note = gr.HTML(elem_id="cell-note")
        blame_view = gr.HTML(elem_id="blame-view", js_on_load=OPEN_TOKEN_JS)
        gr.Markdown("### Where two answers part, and what decided it")
        with gr.Row():
            part_qid = gr.Dropdown([], label="Question", elem_id="part-qid", min_width=100)
            part_a = gr.Dropdown([], label="Method A", elem_id="part-a", min_width=140)
            part_b = gr.Dropdown([], label="Method B", elem_id="part-b", min_width=140)
            part_button = gr.Button("Compare the two answers", variant="primary", elem_id="part-button", min_width=160)
            part_blame = gr.Button("Find the decision that changed this answer", elem_id="part-blame", min_width=160)
        part_view = gr.HTML(elem_id="part-view", js_on_load=OPEN_TOKEN_JS)
        gr.Markdown("### Decision statistics over the dataset")
        stats_view = gr.HTML(elem_id="eval-stats")
        stats_plot_a = gr.Plot(label="Decisions per 100 tokens", elem_id="stats-decisions", visible=False)
        stats_plot_b = gr.Plot(label="First replacement against correctness", elem_id="stats-first", visible=False)
        stats_plot_c = gr.Plot(label="SpecEM weights, every question", elem_id="stats-weights", visible=False)
        gr.Markdown("### Which decision changed the answer, over the dataset")
        blame_stats = gr.HTML(elem_id="blame-stats")
        blame_plot = gr.Plot(label="Decisive decisions by kind", elem_id="blame-plot", visible=False)
    return ResultsTab(results_file, results_ours, results_view, results_plot_a, results_plot_b, explorer_box, grid_filter,
                      grid_ensemble, grid_order, grid, cell_note, part_qid, part_a, part_b, part_button, part_view,
                      stats_view, stats_plot_a, stats_plot_b, stats_plot_c, blame_view, part_blame, blame_stats, blame_plot)


def drafter_visibility(method):
    """The drafter box shows for a method whose one drafter the others verify (SAFE)."""
    return gr.update(visible=verifies_drafter(method))


def update_drafter(model_names):
    """The drafter box follows the chosen models: their names, the first one chosen."""
    names = [n for n in (model_names or [])]
    return gr.update(choices=names, value=names[0] if names else None)
