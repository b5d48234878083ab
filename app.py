"""Ensemble Lens: the Gradio app. It only wires the engine (``ensemble/``) to the views (``visual/``).

Run it with ``make demo`` (or ``python app.py``); it serves on http://127.0.0.1:7860. On a Hugging Face Space
it also works: the embedded models fall back to their hub ids when their packages are absent.
"""

from __future__ import annotations

import csv
import io
import json
import os
import tempfile
import threading
import time
from collections import OrderedDict
from pathlib import Path

import gradio as gr

import visual
from ensemble.access import check_offered
from ensemble.align import compare
from ensemble.errors import EnsembleError, InputError, TraceFormatError
from ensemble.methods import EnsembleRun, RoundEvent, StatusEvent, TokenEvent
from ensemble.methods.base import clean_prompt
from ensemble.models import DEFAULT_MODELS, EMBEDDED, GPU_PRESETS, ModelPool
from ensemble.settings import METHODS, Settings
from ensemble.trace import MAX_TRACE_BYTES, RunTrace

try:  # ZeroGPU on Spaces; a no-op decorator everywhere else
    import spaces  # type: ignore

    gpu = spaces.GPU if os.environ.get("SPACES_ZERO_GPU") else (lambda fn: fn)
except ImportError:  # pragma: no cover - depends on the platform
    gpu = lambda fn: fn  # noqa: E731

DEVICE = os.environ.get("ENSEMBLE_LENS_DEVICE", "cpu")
POOL = ModelPool(device=DEVICE)
QUEUE_SIZE = int(os.environ.get("ENSEMBLE_LENS_QUEUE", "16"))
RUN_CONCURRENCY = int(os.environ.get("ENSEMBLE_LENS_CONCURRENCY", "2"))
STREAM_INTERVAL = 0.2  # seconds between streamed updates (about 5 per second)

METHOD_CHOICES = [
    ("Single model", "single"),
    ("UniTE (fuse every token)", "unite"),
    ("GaC (fuse every token)", "gac"),
    ("SAFE (fuse only where safe)", "safe"),
    ("SpecEM (segments + weights)", "specem"),
]
PRESETS_VISIBLE = DEVICE != "cpu" or os.environ.get("ENSEMBLE_LENS_PRESETS") == "1"
MODEL_CHOICES = list(EMBEDDED) + (list(GPU_PRESETS) if PRESETS_VISIBLE else [])

EXAMPLES = [
    ["Sofia went to Plovdiv in 1999. Where did Sofia go, and when? Answer in one sentence.", "safe"],
    [
        "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. "
        "How many clips did Natalia sell altogether in April and May?",
        "safe",
    ],
    ["What is 1234 + 5678? Write the digits of the result one by one.", "unite"],
    ["Write a Python function that checks whether a string is a palindrome.", "specem"],
    ["Translate 'good morning, my friend' into Bulgarian, Chinese and Japanese.", "gac"],
]
TOKENIZER_EXAMPLES = [
    ["Sofia went to Plovdiv in 1999."],
    ["3.14159 × 2 = 6.28318; 1,000,000 and 0.5%"],
    ["I ❤️ Bulgaria 🇧🇬 and coding 👩‍💻 at 3am"],
    ["我们明天去普罗夫迪夫。東京は大きい。"],
    ["def square(x):\n    return x ** 2  # tabs\tand  spaces"],
]

STRIP_JS = """
element.addEventListener('click', (event) => {
  const token = event.target.closest('[data-i]');
  if (!token) return;
  element.querySelectorAll('.el-selected').forEach((t) => t.classList.remove('el-selected'));
  token.classList.add('el-selected');
  trigger('click', {index: parseInt(token.dataset.i, 10)});
});
"""


# -- per-session state -----------------------------------------------------------------------------------------
class Sessions:
    """The latest run (live or uploaded) and the stop flag of each browser session, bounded in number."""

    def __init__(self, limit: int = 128):
        self._data: OrderedDict[str, dict] = OrderedDict()
        self._lock = threading.Lock()
        self.limit = limit

    def get(self, key: str) -> dict:
        with self._lock:
            entry = self._data.pop(key, None) or {"job": None, "trace": None, "cancel": threading.Event()}
            self._data[key] = entry
            while len(self._data) > self.limit:
                self._data.popitem(last=False)
            return entry

    def trace(self, key: str) -> RunTrace | None:
        entry = self.get(key)
        if entry["job"] is not None:
            return entry["job"].trace
        return entry["trace"]


SESSIONS = Sessions()


def _session(request: gr.Request | None) -> str:
    return getattr(request, "session_hash", None) or "local"


# -- helpers ---------------------------------------------------------------------------------------------------
def _models(names) -> list[str]:
    if isinstance(names, str):
        names = [n.strip() for n in names.split(",")]
    if not isinstance(names, list | tuple):
        raise InputError("models must be a comma-separated list of model names.")
    out = [n for n in names if isinstance(n, str) and n.strip()]
    if not out:
        raise InputError("Choose at least one model.")
    return [check_offered(name, MODEL_CHOICES) for name in out]  # only names this server offers


def build_settings(method: str, values: dict) -> Settings:
    """Settings from the UI or API; 'auto' and empty values mean the method's default."""
    data = {k: v for k, v in (values or {}).items() if v not in (None, "", "auto")}
    return Settings.from_dict(data)


def load_models(names: list[str], progress=None) -> list:
    def report(message: str, fraction: float | None) -> None:
        if progress is not None:
            progress(fraction if fraction is not None else 0.0, desc=message)

    return POOL.get_many(names, report)  # one run's models never evict each other from the pool's budget


def _settings_from_ui(*values) -> dict:
    keys = [
        "max_new_tokens", "temperature", "top_p", "seed", "top_k", "sharpen", "sharpen_lambda", "gac_gate",
        "lookahead", "fusion", "segment_len", "eta", "scoring", "sample_drafts",
    ]
    data = dict(zip(keys, values, strict=True))
    data["gac_gate"] = data["gac_gate"] if data["gac_gate"] and data["gac_gate"] > 0 else None
    data["seed"] = int(data["seed"] or 0)
    return data


def _error_html(message: str) -> str:
    return f'<div class="el-error">{visual.safe(message)}</div>'


def _final_views(trace: RunTrace):
    """Every view of a finished (or uploaded) trace, in the order of RUN_OUTPUTS after strip and status."""
    specem = trace.method == "specem" and trace.rounds
    return (
        visual.legend_html(trace.method, trace.models),
        visual.stats_html(trace),
        visual.token_frame(trace),
        visual.rounds_html(trace) if specem else "",
        visual.score_heatmap(trace, len(trace.rounds) - 1) if specem else None,
        visual.weights_figure(trace) if specem else None,
        gr.update(maximum=max(1, len(trace.rounds) - 1), value=max(0, len(trace.rounds) - 1)),
        gr.update(visible=bool(specem)),
        visual.weights_note(trace) if specem else "",
    )


# -- run tab ---------------------------------------------------------------------------------------------------
@gpu
def run_stream(
    prompt, method, model_names, drafter,
    max_new_tokens, temperature, top_p, seed, top_k, sharpen, sharpen_lambda, gac_gate,
    lookahead, fusion, segment_len, eta, scoring, sample_drafts,
    request: gr.Request, progress=gr.Progress(),
):
    """Stream one run: the strip grows append-only, the other views fill in at the end."""
    settings_values = (max_new_tokens, temperature, top_p, seed, top_k, sharpen, sharpen_lambda, gac_gate,
                       lookahead, fusion, segment_len, eta, scoring, sample_drafts)
    session = SESSIONS.get(_session(request))
    cancel = session["cancel"]
    cancel.clear()
    # Every yield sends the whole view; Gradio diffs it against the last one, so unchanged outputs cost
    # nothing and the strip, which only ever grows, goes out as an "append" of its new tokens.
    view = ["", visual.status_html("Loading models…"), "", "", None, "", None, None, gr.update(value=0), gr.update(visible=False), ""]
    try:
        clean_prompt(prompt)  # fails fast; the run cleans the prompt again and keeps the warnings in its trace
        names = _models(model_names)
        values = _settings_from_ui(*settings_values)
        if method == "safe" and drafter:
            values["drafter"] = drafter if drafter in names else None
        settings = build_settings(method, values)
        settings.validate(method, names)
        yield tuple(view)
        models = load_models(names, progress)
        job = EnsembleRun(models, prompt, method, settings, cancel=cancel)
    except EnsembleError as exc:
        view[0], view[1] = _error_html(str(exc)), visual.status_html(f"⚠️ {exc}")
        yield tuple(view)
        return
    session["job"], session["trace"] = job, None
    builder = visual.StripBuilder(method, job.trace.models)
    view[1] = visual.status_html(" · ".join(job.trace.warnings) or f"Running {method} on {', '.join(job.trace.models)}…")
    view[2] = visual.legend_html(method, job.trace.models)
    yield tuple(view)
    pending, last = [], 0.0
    running = view[1]
    try:
        for event in job.events():
            if isinstance(event, TokenEvent):
                pending.append(event.record)
            elif isinstance(event, StatusEvent):  # SpecEM's drafts, shown while the round's vote is pending
                if pending:  # committed tokens go out first: what is on the strip is all that was decided
                    view[0] += builder.add(pending, job.run.text)
                    pending, last = [], time.perf_counter()
                view[1] = visual.status_html(event.message)
                yield tuple(view)
                continue
            elif isinstance(event, RoundEvent):
                view[1] = running
            now = time.perf_counter()
            if pending and (now - last >= STREAM_INTERVAL or isinstance(event, RoundEvent)):
                view[0] += builder.add(pending, job.run.text)
                pending, last = [], now
                yield tuple(view)
    except Exception as exc:  # noqa: BLE001 - a failing model must not take the app down
        session["job"], session["trace"] = None, job.trace  # the partial trace stays inspectable
        kind = "" if isinstance(exc, EnsembleError) else f"The run failed: {type(exc).__name__}: "
        view[1] = visual.status_html(f"⚠️ {kind}{exc}. Other runs are not affected." if kind else f"⚠️ {exc}")
        yield tuple(view)
        return
    if pending:
        view[0] += builder.add(pending, job.run.text)
    trace = job.trace
    # Keep the trace, drop the run: its adapters hold every model's KV cache.
    session["job"], session["trace"] = None, trace
    s = trace.stats
    done = (
        f"Done: {s.generated_tokens} tokens, E/T {s.et_ratio:.3f}, {s.latency_s:.1f} s, {s.tokens_per_s:.2f} tokens/s "
        f"(stop: {s.stop_reason}). Click any token to see why."
    )
    if s.stop_reason == "cancelled":
        done = f"Stopped after {s.generated_tokens} tokens ({s.latency_s:.1f} s). Click any token to see why."
    if trace.warnings:
        done = " · ".join(trace.warnings) + " · " + done
    yield (view[0], visual.status_html(done), *_final_views(trace))


def stop_run(request: gr.Request):
    SESSIONS.get(_session(request))["cancel"].set()
    return visual.status_html("Stopping…")


def inspect(request: gr.Request, evt: gr.EventData):
    trace = SESSIONS.trace(_session(request))
    data = getattr(evt, "_data", None)  # what the strip's click handler passed to trigger('click', {...})
    index = data.get("index") if isinstance(data, dict) else None
    if trace is None or not isinstance(index, int) or not 0 <= index < len(trace.tokens):
        return "<p>Run the ensemble or load a trace, then click a token.</p>", "", None, None, None
    return (
        visual.explain(trace, index),
        visual.tokenization_html(trace, index),
        visual.topk_figure(trace, index),
        visual.fusion_figure(trace, index),
        visual.inspector_json(trace, index),
    )


def show_round(round_index, request: gr.Request):
    trace = SESSIONS.trace(_session(request))
    if trace is None or not trace.rounds:
        return None
    return visual.score_heatmap(trace, min(int(round_index or 0), len(trace.rounds) - 1))


def update_drafter(model_names):
    names = [n for n in (model_names or [])]
    return gr.update(choices=names, value=names[0] if names else None)


# -- tokenizer tab --------------------------------------------------------------------------------------------
def tokenize_view(text, model_names, show_whitespace):
    try:
        names = _models(model_names)
        comparison = compare(text or "", {name: POOL.keys(name) for name in names})
    except EnsembleError as exc:
        return _error_html(str(exc)), None
    return visual.tokenizers_html(comparison, show_whitespace=bool(show_whitespace)), visual.tokenizer_counts_frame(comparison)


# -- compare tab ----------------------------------------------------------------------------------------------
@gpu
def compare_stream(prompt, methods, model_names, max_new_tokens, request: gr.Request, progress=gr.Progress()):
    try:
        clean_prompt(prompt)
        methods = [m for m in (methods or []) if m in METHODS]
        if not 2 <= len(methods) <= 4:
            raise InputError("Pick two to four methods to compare.")
        names = _models(model_names)
        for method in methods:
            Settings(max_new_tokens=int(max_new_tokens)).validate(method, names)
        models = load_models(names, progress)
    except EnsembleError as exc:
        yield _error_html(str(exc)), None, None
        return
    cancel = SESSIONS.get(_session(request))["cancel"]
    cancel.clear()
    traces: dict[str, RunTrace] = {}
    for method in methods:
        job = EnsembleRun(models, prompt, method, Settings(max_new_tokens=int(max_new_tokens)), cancel=cancel)
        try:
            for _ in job.events():
                pass
        except Exception as exc:  # noqa: BLE001 - show the failure, keep the other methods
            yield _error_html(f"{method} failed: {exc}"), None, None
            return
        traces[method] = job.trace
        yield _compare_html(traces), visual.compare_frame(traces), visual.compare_figure(traces)
        if cancel.is_set():
            return


def _compare_html(traces: dict[str, RunTrace]) -> str:
    cards = []
    for label, trace in traces.items():
        cards.append(
            f'<div class="el-compare-card"><h4>{visual.safe(label)}</h4>'
            + (f'<p class="el-warning">{visual.safe(" · ".join(trace.warnings))}</p>' if trace.warnings else "")
            + f"{visual.legend_html(trace.method, trace.models)}"
            + f'<div class="el-strip">{visual.strip_html(trace)}</div></div>'
        )
    return f'<div class="el-compare">{"".join(cards)}</div>'


# -- trace tab ------------------------------------------------------------------------------------------------
def export_trace(request: gr.Request):
    trace = SESSIONS.trace(_session(request))
    if trace is None:
        raise gr.Error("Nothing to export yet: run the ensemble or load a trace first.")
    folder = Path(tempfile.mkdtemp(prefix="ensemble-lens-"))
    stamp = time.strftime("%Y%m%d-%H%M%S")
    json_path = folder / f"trace-{trace.method}-{stamp}.json"
    json_path.write_text(trace.to_json(indent=1), encoding="utf-8")
    csv_path = folder / f"tokens-{trace.method}-{stamp}.csv"
    rows = trace.token_table()
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(rows[0]) if rows else ["index"])
    writer.writeheader()
    writer.writerows(rows)
    csv_path.write_text(buffer.getvalue(), encoding="utf-8")
    return str(json_path), str(csv_path)


def import_trace(file, request: gr.Request):
    """Replay an uploaded trace in every view; the file is JSON only, schema- and size-checked."""
    nothing = (gr.skip(),) * 11
    if file is None:
        return ("", visual.status_html("Choose a JSON trace file."), *nothing[2:])
    path = Path(file if isinstance(file, str) else getattr(file, "name", ""))
    try:
        if path.stat().st_size > MAX_TRACE_BYTES:
            raise TraceFormatError(f"The file is {path.stat().st_size / 1e6:.1f} MB; the limit is 20 MB.")
        trace = RunTrace.from_json(path.read_bytes())
    except (OSError, TraceFormatError) as exc:
        return (_error_html(str(exc)), visual.status_html(f"⚠️ Could not load the trace: {exc}"), *nothing[2:])
    session = SESSIONS.get(_session(request))
    session["job"], session["trace"] = None, trace
    # Everything in an uploaded trace is untrusted: the status line escapes it like every other view.
    status = f"Replaying a {trace.method} trace of {', '.join(trace.models)} ({len(trace.tokens)} tokens). Click any token."
    return (visual.strip_html(trace), visual.status_html(status), *_final_views(trace))


# -- results tab ----------------------------------------------------------------------------------------------
COMMITTED_RESULTS = Path(__file__).resolve().parent / "docs" / "results" / "gsm8k-summary.csv"


def show_results(file):
    if file is None:
        return "<p>Upload the summary.csv written by <code>python -m ensemble evaluate</code>.</p>", None, None
    try:
        from ensemble.evaluation import load_summary

        rows = load_summary(file if isinstance(file, str) else file.name)
    except EnsembleError as exc:
        return _error_html(str(exc)), None, None
    figures = visual.results_figures(rows)
    return visual.results_html(rows), figures[0] if figures else None, figures[1] if len(figures) > 1 else None


# -- API for scripts ------------------------------------------------------------------------------------------
def run_ensemble(prompt: str, method: str = "safe", models: str = ",".join(DEFAULT_MODELS), settings: dict | None = None) -> dict:
    """Run a method on a prompt and return the full trace as JSON.

    Args:
        prompt: the user prompt.
        method: single | unite | gac | safe | specem.
        models: comma-separated model names (embedded: qwen, smollm2, gemma3; or hub ids / local folders).
        settings: engine options as a JSON object, e.g. {"max_new_tokens": 64, "lookahead": 5, "fusion": "gac"}.
    """
    try:
        if isinstance(settings, str):
            settings = json.loads(settings or "{}")
        if settings is not None and not isinstance(settings, dict):
            raise InputError("settings must be a JSON object of engine options.")
        clean_prompt(prompt)
        names = _models(models)
        config = build_settings(method, settings or {})
        config.validate(method, names)
        job = EnsembleRun(load_models(names), prompt, method, config)
        for _ in job.events():
            pass
    except (EnsembleError, ValueError) as exc:
        raise gr.Error(str(exc)) from exc
    except Exception as exc:
        raise gr.Error(f"The run failed: {type(exc).__name__}: {exc}") from exc
    return job.trace.to_dict()


def tokenize(text: str, models: str = ",".join(DEFAULT_MODELS)) -> dict:
    """Compare how the models' tokenizers cut a text (tokens with spans, shared boundaries, agreement)."""
    try:
        names = _models(models)
        return compare(text, {name: POOL.keys(name) for name in names})
    except EnsembleError as exc:
        raise gr.Error(str(exc)) from exc


# -- layout -----------------------------------------------------------------------------------------------------
INTRO = """# 🔍 Ensemble Lens
Run several small language models **as one ensemble** and see, token by token, why the ensemble did what it
did: where **SAFE** fused their distributions, where a **tokenizer mismatch** made fusing unsafe, where the
models already agreed, and how **SpecEM** weighs whole segments. Click any token for the reason."""


def build_app() -> gr.Blocks:
    with gr.Blocks(title="Ensemble Lens") as demo:
        gr.Markdown(INTRO)
        with gr.Tabs():
            with gr.Tab("Run", id="run"):
                method = gr.Radio(METHOD_CHOICES, value="safe", label="Method", elem_id="method", render=False)
                with gr.Row():
                    with gr.Column(scale=3):
                        prompt = gr.Textbox(label="Prompt", lines=3, max_lines=12, placeholder="Ask something…", elem_id="prompt")
                        with gr.Accordion("Examples: names, numbers, math, code, other languages", open=False):
                            gr.Examples(EXAMPLES, inputs=[prompt, method], cache_examples=False)
                    with gr.Column(scale=2):
                        method.render()
                        with gr.Row():
                            model_box = gr.CheckboxGroup(MODEL_CHOICES, value=list(DEFAULT_MODELS), label="Models", elem_id="models")
                            drafter = gr.Dropdown(list(DEFAULT_MODELS), value="qwen", label="SAFE drafter", elem_id="drafter")
                with gr.Accordion("Engine settings", open=False):
                    with gr.Row():
                        max_new_tokens = gr.Slider(1, 1024, value=96, step=1, label="Max new tokens", elem_id="max-tokens")
                        temperature = gr.Slider(0.0, 2.0, value=0.0, step=0.05, label="Temperature (0 = greedy)")
                        top_p = gr.Slider(0.05, 1.0, value=1.0, step=0.05, label="Top-p")
                        seed = gr.Number(value=0, precision=0, label="Seed")
                    with gr.Row():
                        lookahead = gr.Slider(1, 16, value=5, step=1, label="SAFE lookahead n")
                        fusion = gr.Radio(["unite", "gac"], value="unite", label="SAFE fusion")
                        sharpen = gr.Radio(["auto", "none", "heuristic", "geometric"], value="auto", label="Sharpening")
                        sharpen_lambda = gr.Slider(0.0, 1.0, value=0.1, step=0.01, label="Heuristic λ")
                    with gr.Row():
                        top_k = gr.Slider(1, 50, value=10, step=1, label="UniTE top-k")
                        gac_gate = gr.Slider(0.0, 1.0, value=0.5, step=0.05, label="GaC gate (paper: 0.5; 0 = off)")
                        segment_len = gr.Slider(1, 64, value=10, step=1, label="SpecEM segment length")
                        eta = gr.Slider(0.0, 2.0, value=0.5, step=0.05, label="SpecEM η (0 = no feedback)")
                        scoring = gr.Radio(["logprob", "logit"], value="logprob", label="SpecEM scoring")
                        sample_drafts = gr.Checkbox(value=False, label="SpecEM: sample drafts (T 0.6, top-p 0.9)")
                with gr.Row():
                    run_button = gr.Button("Run", variant="primary", elem_id="run-button")
                    stop_button = gr.Button("Stop", variant="stop", elem_id="stop-button")
                status = gr.HTML(elem_id="status")  # HTML built by visual.status_html: Markdown would fetch ![x](url)
                legend = gr.HTML(elem_id="legend")
                strip = gr.HTML(value="", elem_id="strip", elem_classes=["el-strip"], js_on_load=STRIP_JS)
                with gr.Row():
                    with gr.Column(scale=1):
                        explanation = gr.HTML(elem_id="explanation")
                        tokenization = gr.HTML(elem_id="tokenization")
                    with gr.Column(scale=1):
                        topk_plot = gr.Plot(label="Each model's top-k", elem_id="topk-plot")
                        fusion_plot = gr.Plot(label="Fused distribution: before / after sharpening", elem_id="fusion-plot")
                with gr.Accordion("Raw record (JSON)", open=False):
                    record_json = gr.JSON(elem_id="record-json")
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
                    token_table = gr.Dataframe(elem_id="token-table", wrap=True)

            with gr.Tab("Tokenizers", id="tokenizers"):
                gr.Markdown(visual.MISMATCH_EXPLAINER)
                with gr.Row():
                    tok_text = gr.Textbox(label="Text", lines=3, value="Sofia went to Plovdiv in 1999.", elem_id="tok-text")
                    with gr.Column():
                        tok_models = gr.CheckboxGroup(MODEL_CHOICES, value=list(DEFAULT_MODELS), label="Tokenizers")
                        tok_ws = gr.Checkbox(value=True, label="Show whitespace (· ↵ →)")
                        tok_button = gr.Button("Compare tokenizations", variant="primary", elem_id="tok-button")
                gr.Examples(TOKENIZER_EXAMPLES, inputs=[tok_text], label="Examples")
                tok_view = gr.HTML(elem_id="tok-view")
                tok_counts = gr.Dataframe(label="Token counts", elem_id="tok-counts")

            with gr.Tab("Compare", id="compare"):
                with gr.Row():
                    cmp_prompt = gr.Textbox(label="Prompt", lines=2, value=EXAMPLES[1][0], elem_id="cmp-prompt")
                    with gr.Column():
                        cmp_methods = gr.CheckboxGroup(METHOD_CHOICES, value=["unite", "safe"], label="Methods (2-4)")
                        cmp_models = gr.CheckboxGroup(MODEL_CHOICES, value=list(DEFAULT_MODELS), label="Models")
                        cmp_tokens = gr.Slider(8, 512, value=64, step=4, label="Max new tokens", elem_id="cmp-tokens")
                        with gr.Row():
                            cmp_button = gr.Button("Compare", variant="primary", elem_id="cmp-button")
                            cmp_stop = gr.Button("Stop", variant="stop", elem_id="cmp-stop")
                cmp_view = gr.HTML(elem_id="cmp-view")
                cmp_table = gr.Dataframe(label="Stats", elem_id="cmp-table")
                cmp_plot = gr.Plot(label="Latency and E/T", elem_id="cmp-plot")

            with gr.Tab("Trace", id="trace"):
                gr.Markdown(
                    "Download the current run as a JSON trace and its per-token table as CSV, or load a JSON trace "
                    "to replay every view of the Run tab without loading any model (JSON only, at most 20 MB)."
                )
                with gr.Row():
                    export_button = gr.Button("Export current run", elem_id="export-button")
                    json_file = gr.File(label="Trace (JSON)", elem_id="json-file")
                    csv_file = gr.File(label="Tokens (CSV)", elem_id="csv-file")
                upload = gr.File(label="Load a trace (.json)", file_types=[".json"], type="filepath", elem_id="upload")

            with gr.Tab("Results", id="results"):
                gr.Markdown("Open the `summary.csv` written by `python -m ensemble evaluate` (accuracy, E/T, speed per method).")
                results_file = gr.File(label="summary.csv", file_types=[".csv"], type="filepath", elem_id="results-file")
                results_ours = gr.Button("Open this project's GSM8K run (docs/results.md)", size="sm",
                                         visible=COMMITTED_RESULTS.exists())
                results_view = gr.HTML(elem_id="results-view")
                with gr.Row():
                    results_plot_a = gr.Plot(label="Accuracy vs seconds per question")
                    results_plot_b = gr.Plot(label="E/T per method")

        settings_inputs = [max_new_tokens, temperature, top_p, seed, top_k, sharpen, sharpen_lambda, gac_gate,
                           lookahead, fusion, segment_len, eta, scoring, sample_drafts]
        run_outputs = [strip, status, legend, stats, token_table, rounds, heatmap, weights_plot, round_slider, specem_view,
                       weights_note]
        run_button.click(
            run_stream,
            inputs=[prompt, method, model_box, drafter, *settings_inputs],
            outputs=run_outputs,
            concurrency_limit=RUN_CONCURRENCY,
            concurrency_id="engine",
            api_visibility="private",
        )
        prompt.submit(
            run_stream,
            inputs=[prompt, method, model_box, drafter, *settings_inputs],
            outputs=run_outputs,
            concurrency_id="engine",
            api_visibility="private",
        )
        # Stop sets the session's flag (outside the queue, so it runs at once); the engine checks it before every
        # forward pass and ends the run cleanly, so the partial trace stays complete and the worker is free.
        stop_button.click(stop_run, outputs=[status], queue=False, api_visibility="private")
        strip.click(
            inspect, outputs=[explanation, tokenization, topk_plot, fusion_plot, record_json],
            concurrency_limit=None, api_visibility="private",
        )
        round_slider.change(show_round, inputs=[round_slider], outputs=[heatmap], api_visibility="private")
        model_box.change(update_drafter, inputs=[model_box], outputs=[drafter], api_visibility="private")
        tok_button.click(tokenize_view, inputs=[tok_text, tok_models, tok_ws], outputs=[tok_view, tok_counts],
                         concurrency_id="tokenize", concurrency_limit=4, api_visibility="private")
        tok_ws.change(tokenize_view, inputs=[tok_text, tok_models, tok_ws], outputs=[tok_view, tok_counts],
                      concurrency_id="tokenize", api_visibility="private")
        cmp_button.click(compare_stream, inputs=[cmp_prompt, cmp_methods, cmp_models, cmp_tokens],
                         outputs=[cmp_view, cmp_table, cmp_plot], concurrency_id="engine", api_visibility="private")
        cmp_stop.click(stop_run, outputs=[status], queue=False, api_visibility="private")
        export_button.click(export_trace, outputs=[json_file, csv_file], api_visibility="private")
        upload.upload(import_trace, inputs=[upload], outputs=run_outputs, api_visibility="private")
        results_file.upload(show_results, inputs=[results_file], outputs=[results_view, results_plot_a, results_plot_b],
                            api_visibility="private")
        results_ours.click(lambda: show_results(str(COMMITTED_RESULTS)), outputs=[results_view, results_plot_a, results_plot_b],
                           api_visibility="private")
        gr.api(run_ensemble, api_name="run_ensemble", concurrency_id="engine", concurrency_limit=RUN_CONCURRENCY)
        gr.api(tokenize, api_name="tokenize", concurrency_id="tokenize", concurrency_limit=4)
        demo.load(tokenize_view, inputs=[tok_text, tok_models, tok_ws], outputs=[tok_view, tok_counts], api_visibility="private")
    demo.queue(max_size=QUEUE_SIZE, default_concurrency_limit=RUN_CONCURRENCY)
    return demo


def warm_up() -> None:
    """Load the default models before serving, so the first run streams at once."""
    for name in DEFAULT_MODELS:
        try:
            POOL.get(name)
        except EnsembleError as exc:
            print(f"[app] {name} is not available: {exc}", flush=True)


demo = build_app()


def launch(port: int | None = None, block: bool = True, host: str | None = None):
    """Serve the app (``block=False`` returns at once: tests and scripts use it)."""
    return demo.launch(
        server_name=host or os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"),
        server_port=port or int(os.environ.get("GRADIO_SERVER_PORT", "7860")),
        css=visual.CSS,
        theme=gr.themes.Soft(),
        prevent_thread_lock=not block,
        quiet=not block,
    )


if __name__ == "__main__":
    if os.environ.get("ENSEMBLE_LENS_NO_WARMUP") != "1":
        warm_up()
    launch()
