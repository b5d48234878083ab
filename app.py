"""Ensemble Lens: the Gradio app. It only wires the engine (``ensemble/``) to the views (``visual/``).

Run it with ``make demo`` (or ``python app.py``); it serves on http://127.0.0.1:7860. On a Hugging Face Space
it also works: the embedded models fall back to their hub ids when their packages are absent. What the handlers do
lives in ``ui/``: the configuration and singletons (``ui.config``), a run and its Stop (``ui.running``), a shown
trace and its files (``ui.replay``), Compare (``ui.comparing``), Tokenizers (``ui.tokenizers``), the API and MCP
tools (``ui.api``), the layout (``ui.tabs``).
"""

from __future__ import annotations

import importlib
import os

import gradio as gr

import visual
from ensemble.members import close_backends, interrupt_on_sigterm
from ensemble.models import DEFAULT_ENSEMBLE, DEFAULT_MODELS
from ui import api, blaming, comparing, config, links, openai_routes, replay, running, space, tabs, tokenizers
from ui import results as results_ui
from ui.sessions import click_data, if_newest
from ui.view_tuples import CompareView, ExportView, ForkView, InspectView, ResultsView, RunView, TokenizerView, outputs, updates
from visual import fonts


# -- layout and wiring ------------------------------------------------------------------------------------------
def build_app() -> gr.Blocks:
    models = config.MODEL_CHOICES
    with gr.Blocks(title="Ensemble Lens") as demo:
        gr.Markdown(tabs.INTRO)
        projector = gr.Checkbox(False, label="Projector mode: large text", elem_id="projector", container=False)
        projector.change(None, inputs=[projector], js=tabs.PROJECTOR_JS)
        with gr.Tabs() as tab_box:
            with gr.Tab("Run", id="run"):
                run = tabs.build_run_tab(models, config.RUNTIME_CHOICES, config.RUNTIME)
            with gr.Tab("Tokenizers", id="tokenizers"):
                tok = tabs.build_tokenizer_tab(models, list(DEFAULT_MODELS))
            with gr.Tab("Compare", id="compare"):
                cmp = tabs.build_compare_tab(models, list(DEFAULT_ENSEMBLE))
            with gr.Tab("Trace", id="trace"):
                trace = tabs.build_trace_tab()
            with gr.Tab("Results", id="results"):
                results = tabs.build_results_tab(config.COMMITTED_RESULTS.exists())
        wire_run_tab(run, trace)
        opened = wire_links(demo, tab_box, run, tok, projector)
        wire_other_tabs(opened, run, tok, cmp, trace, results)
        wire_results_tab(results, run, tab_box)
        gr.api(api.run_ensemble, api_name="run_ensemble", concurrency_id="engine", concurrency_limit=config.RUN_CONCURRENCY)
        gr.api(api.fork, api_name="fork", concurrency_id="engine", concurrency_limit=config.RUN_CONCURRENCY)
        gr.api(api.tokenize, api_name="tokenize", concurrency_id="tokenize", concurrency_limit=4)
        gr.api(api.explain_token, api_name="explain_token", concurrency_id="tokenize")
        # their own group: two answers compared at a time, the tokenizer's four slots left to it
        gr.api(results_ui.explain_answers, api_name="explain_answers", concurrency_id="explain", concurrency_limit=2)
        gr.api(results_ui.explain_run, api_name="explain_run", concurrency_id="explain")
        gr.api(blaming.blame_answer, api_name="blame_answer", concurrency_id="engine", concurrency_limit=config.RUN_CONCURRENCY)
        demo.unload(on_close)  # a closed page's unpacked evaluation folder is removed
    demo.queue(max_size=config.QUEUE_SIZE, default_concurrency_limit=config.RUN_CONCURRENCY)
    return demo


def on_close(request: gr.Request) -> None:
    config.SESSIONS.close(config.session_key(request))


def wire_run_tab(run: tabs.RunTab, trace: tabs.TraceTab) -> None:
    """The Run tab's events: run (button or Enter), stop, click a token, pick a round; and a trace upload,
    which fills the same views."""
    names = list(run.controls)
    inputs = [run.prompt, run.method, run.model_box, run.drafter, run.runtime, *run.controls.values()]

    def on_run(request: gr.Request, progress=gr.Progress(), *values):  # Gradio fills request and progress first
        prompt, method, model_names, drafter, runtime, *settings = values
        chosen = dict(zip(names, settings, strict=True))
        cleared = updates(run, replay.cleared_inspector())  # with the run's first view: the old token's explanation,
        with running.busy(request):                           # rows and charts never stand under the new strip
            for view in running.run_stream(prompt, method, model_names, drafter, chosen, request, progress, runtime=runtime):
                yield updates(run, view) | cleared
                cleared = {}

    run_outputs = outputs(run, RunView)
    streamed = [*run_outputs, *outputs(run, InspectView)]  # on_run's first view clears the last run's inspector
    stop_on(run.stop_button, [run.run_button.click, run.prompt.submit, run.fork_button.click, run.whatif.click])
    clicked = run.run_button.click(on_run, inputs=inputs, outputs=streamed, concurrency_limit=config.RUN_CONCURRENCY,
                                   concurrency_id="engine", api_name="run_stream", api_visibility="private")  # scripts/app_latency.py
    submitted = run.prompt.submit(on_run, inputs=inputs, outputs=streamed, concurrency_id="engine", api_visibility="private")
    # Stop sets the session's flag (outside the queue, so it runs at once); the engine checks it before every
    # forward pass and ends the run cleanly, so the partial trace stays complete and the worker is free.
    run.stop_button.click(running.stop_run_at, inputs=[run.strip_count], outputs=[run.status], queue=False, js=tabs.STRIP_COUNT_JS,
                          api_visibility="private")

    def on_click(request: gr.Request, evt: gr.EventData):
        view = replay.inspect_latest(request, evt)
        return {c: gr.skip() for c in outputs(run, InspectView)} if view is None else updates(run, view)

    # every click runs (quick clicks or ←/→ held down); an answer overtaken by a newer click is dropped, so the
    # explanation always ends on the last token clicked (Gradio's always_last would replay the first click's data)
    run.strip.click(on_click, outputs=outputs(run, InspectView), concurrency_limit=None, api_visibility="private",
                    trigger_mode="multiple")
    run.round_slider.change(replay.show_round, inputs=[run.round_slider], outputs=[run.heatmap], api_visibility="private")
    run.token_filter.input(replay.filter_tokens, inputs=[run.token_filter], outputs=[run.token_table], api_visibility="private")
    run.model_box.change(tabs.update_drafter, inputs=[run.model_box], outputs=[run.drafter], api_visibility="private")
    run.method.change(tabs.drafter_visibility, inputs=[run.method], outputs=[run.drafter],
                      api_visibility="private")  # the drafter box is SAFE's
    for starts in (run.run_button.click, run.prompt.submit):
        starts(None, js=tabs.SCROLL_TO_STRIP_JS)

    def on_fork(method, runtime, request: gr.Request):
        with running.busy(request):
            for view in running.fork_selected(method, runtime, request):
                yield updates(run, view)

    # a previous fork's comparison goes at the click: registered before the streaming listener, which a later
    # listener of the same trigger would wait for (see stop_on)
    run.fork_button.click(lambda: "", outputs=[run.fork_view], queue=False, api_visibility="private")
    forked = run.fork_button.click(on_fork, inputs=[run.fork_method, run.runtime], outputs=outputs(run, ForkView),
                                   concurrency_id="engine", api_visibility="private")

    def on_whatif(runtime, request: gr.Request, evt: gr.EventData):
        with running.busy(request):
            for view in running.fork_selected(None, runtime, request, getattr(evt, "key", None)):
                yield updates(run, view)

    what_if = run.whatif.click(on_whatif, inputs=[run.runtime], outputs=outputs(run, ForkView), concurrency_id="engine",
                               api_visibility="private")
    stop_off(run.stop_button, [clicked, submitted, forked, what_if])

    def on_upload(file, request: gr.Request):
        view, session = replay.import_trace(file, request), config.session(request)
        loaded, session.imported = session.imported, None
        if loaded is None:  # refused: the reason shows where the file was chosen; the Run tab stays as it was
            return {trace.trace_status: view.status}
        filled = replay.form_updates(run, loaded)
        done = visual.status_html(f"Loaded: the Run tab replays this {loaded.method} trace ({len(loaded.tokens)} tokens); "
                                  "its prompt, method, models and settings fill the form, so Run runs it again.")
        return updates(run, view) | updates(run, replay.cleared_inspector()) | filled | {trace.trace_status: done}

    trace.upload.upload(on_upload, inputs=[trace.upload],
                        outputs=[*run_outputs, *outputs(run, InspectView), trace.trace_status, *replay.form_components(run)],
                        api_visibility="private")


def stop_on(stop: gr.Button, triggers: list) -> None:
    """Stop turns active (red) at once when one of ``triggers`` starts something that streams. Registered before the
    streaming listener of the same trigger: Gradio runs a trigger's listeners in the order they were added, and one
    added after a streaming listener waits until that stream ends."""
    for trigger in triggers:
        trigger(lambda: running.stop_button(True), outputs=[stop], queue=False, api_visibility="private")


def stop_off(stop: gr.Button, events: list) -> None:
    """Stop turns inactive (grey, disabled) when one of ``events`` ends, unless another of the session's still streams
    (``ui.running.stop_idle``)."""
    for event in events:
        event.then(running.stop_idle, outputs=[stop], queue=False, api_visibility="private")


def wire_other_tabs(opened, run: tabs.RunTab, tok: tabs.TokenizerTab, cmp: tabs.CompareTab, trace: tabs.TraceTab,
                    results: tabs.ResultsTab) -> None:
    tok_inputs = [tok.tok_text, tok.tok_models, tok.tok_ws, tok.tok_ids]

    def on_tokenize(text, model_names, show_whitespace, show_ids):
        return updates(tok, tokenizers.tokenize_view(text, model_names, show_whitespace, show_ids))

    tok.tok_button.click(on_tokenize, inputs=tok_inputs, outputs=outputs(tok, TokenizerView), concurrency_id="tokenize",
                         concurrency_limit=4, api_visibility="private")
    tok.tok_save.click(tokenizers.tokenizers_page, inputs=[tok.tok_text, tok.tok_models, tok.tok_ids], outputs=[tok.tok_html],
                       concurrency_id="tokenize", api_visibility="private")
    for switch in (tok.tok_ws, tok.tok_ids):
        switch.change(on_tokenize, inputs=tok_inputs, outputs=outputs(tok, TokenizerView), concurrency_id="tokenize",
                      api_visibility="private")

    controls = list(run.controls)

    def on_compare(request: gr.Request, progress=gr.Progress(), *values):
        prompt, methods, model_names, max_new_tokens, drafter, *settings = values
        chosen = dict(zip(controls, settings, strict=True))
        with running.busy(request):
            for view in comparing.compare_stream(prompt, methods, model_names, max_new_tokens, request, progress, chosen, drafter):
                yield updates(cmp, view)

    stop_on(cmp.cmp_stop, [cmp.cmp_button.click])
    # the explanation of a token of the previous comparison goes with its cards, at the click (before the stream)
    cmp.cmp_button.click(lambda: tabs.COMPARE_HINT, outputs=[cmp.cmp_inspect], queue=False, api_visibility="private")
    compared = cmp.cmp_button.click(on_compare, inputs=[cmp.cmp_prompt, cmp.cmp_methods, cmp.cmp_models, cmp.cmp_tokens,
                                                        run.drafter, *run.controls.values()],
                                    outputs=outputs(cmp, CompareView), concurrency_id="engine", api_visibility="private")
    stop_off(cmp.cmp_stop, [compared])
    def on_compare_click(request: gr.Request, evt: gr.EventData):
        html = if_newest(config.SESSIONS, config.session_key(request), "compare", evt,
                         lambda: (comparing.inspect_compared(request, evt), {}))
        return gr.skip() if html is None else html

    cmp.cmp_view.click(on_compare_click, outputs=[cmp.cmp_inspect], concurrency_limit=None, api_visibility="private",
                       trigger_mode="multiple")  # as the strip's clicks: the newest click's answer wins
    cmp.cmp_stop.click(running.stop_run, outputs=[cmp.cmp_status], queue=False, api_visibility="private")

    def on_export(request: gr.Request):
        return updates(trace, replay.export_trace(request))

    trace.export_button.click(on_export, outputs=outputs(trace, ExportView), api_visibility="private")
    opened.then(on_tokenize, inputs=tok_inputs, outputs=outputs(tok, TokenizerView), api_visibility="private")

    def on_load(request: gr.Request):
        view, inspected = replay.first_view(request)
        return updates(run, view) | updates(run, inspected)

    opened.then(on_load, outputs=[*outputs(run, RunView), *outputs(run, InspectView)], api_visibility="private")


def wire_results_tab(results: tabs.ResultsTab, run: tabs.RunTab, tab_box: gr.Tabs) -> None:
    """Open an evaluation, filter its grid, open a cell in the Run tab, compare two answers (``ui.results``)."""
    shown = [*outputs(results, ResultsView), *outputs(results, results_ui.ExplorerView)]

    def on_open(path, request: gr.Request):
        summary, explorer, folder = results_ui.open_evaluation(path) if path else (results_ui.show_summary(None), results_ui.ExplorerView(), None)
        config.session(request).evaluation = folder
        return updates(results, summary) | updates(results, explorer)

    def on_ours(request: gr.Request):
        return on_open(results_ui.COMMITTED_RUN, request)

    stats_outputs = [results.stats_view, results.stats_plot_a, results.stats_plot_b, results.stats_plot_c, results.blame_stats,
                     results.blame_plot]

    def on_stats(request: gr.Request):  # after the grid shows: the statistics read every trace
        view = updates(results, results_ui.stats_view(config.session(request).evaluation))
        return {component: view[component] for component in stats_outputs}

    for opened_folder in (results.results_file.upload(on_open, inputs=[results.results_file], outputs=shown, api_visibility="private"),
                          results.results_ours.click(on_ours, outputs=shown, api_visibility="private")):
        opened_folder.then(on_stats, outputs=stats_outputs, show_progress="minimal", api_visibility="private")

    def on_filter(kind, ensemble, order, request: gr.Request):
        return results_ui.filtered_grid(config.session(request).evaluation, kind, ensemble, order)

    def on_part(qid, a, b, request: gr.Request):
        return results_ui.parting_view(config.session(request).evaluation, qid, a, b)

    grid_inputs = [results.grid_filter, results.grid_ensemble, results.grid_order]
    for control in grid_inputs:
        control.input(on_filter, inputs=grid_inputs, outputs=[results.grid], api_visibility="private")

    def on_cell(request: gr.Request, evt: gr.EventData):
        folder, data = config.session(request).evaluation, click_data(evt)
        picked = {}  # the pair view's question and method B follow the grid's click
        if folder is not None and data.get("qid") in folder.question_ids and data.get("method") in folder.methods:
            picked = {results.part_qid: gr.update(value=data["qid"]), results.part_b: gr.update(value=data["method"])}
        if data.get("action") == "blame":
            return picked | {results.blame_view: blaming.ask(folder, data.get("qid"), data.get("method")), results.cell_note: ""}
        trace, note = results_ui.open_cell(folder, data)
        if trace is None:
            return picked | {results.cell_note: note}
        status = (f"Question {data['qid']}, {data['method']} ({results_ui.cell_words(folder, data['qid'], data['method'])}): "
                  f"replaying this answer of the evaluation ({len(trace.tokens)} tokens). Click any token.")
        return (updates(run, replay.replay(request, trace, status)) | updates(run, replay.cleared_inspector())
                | replay.form_updates(run, trace) | picked | {results.cell_note: note, tab_box: gr.Tabs(selected="run")})

    opened = results.grid.click(on_cell, outputs=[*outputs(run, RunView), *outputs(run, InspectView),
                                                  *replay.form_components(run), results.cell_note, tab_box, results.part_qid,
                                                  results.part_b, results.blame_view],
                                api_visibility="private")
    opened.then(None, js=tabs.SCROLL_TO_STRIP_JS)  # the grid was scrolled far down: the answer's strip comes into view

    def on_asked(request: gr.Request, progress=gr.Progress()):  # a cell's "find the decision" that needs forks
        html = blaming.run_asked(config.session(request).evaluation, progress)
        return gr.skip() if html is None else html

    opened.then(on_asked, outputs=[results.blame_view], concurrency_id="engine", api_visibility="private")
    results.part_button.click(on_part, inputs=[results.part_qid, results.part_a, results.part_b], outputs=[results.part_view],
                              api_visibility="private")

    def on_part_blame(qid, a, b, request: gr.Request, progress=gr.Progress()):
        folder = config.session(request).evaluation
        method, reference = (a, b) if folder is not None and b in folder.singles() else (b, a)
        return blaming.find(folder, qid, method, reference, progress=progress)

    results.part_blame.click(on_part_blame, inputs=[results.part_qid, results.part_a, results.part_b],
                             outputs=[results.part_view], concurrency_id="engine", api_visibility="private")

    def on_open_token(request: gr.Request, evt: gr.EventData):
        trace, index, view, status = blaming.open_token(config.session(request).evaluation, click_data(evt))
        if trace is None:
            return {results.cell_note: view}
        shown = replay.replay(request, trace, status)
        config.session(request).selected = (trace, index)  # "Fork from the selected token" forks there
        return (updates(run, shown._replace(strip=replay.selected_in_strip(shown.strip, index), fork_view=view))
                | updates(run, replay.inspector(trace, index)) | replay.form_updates(run, trace) | {tab_box: gr.Tabs(selected="run")})

    for view in (results.blame_view, results.part_view):
        shown_token = view.click(on_open_token, outputs=[*outputs(run, RunView), *outputs(run, InspectView),
                                                         *replay.form_components(run), results.cell_note, tab_box],
                                 api_visibility="private")
        shown_token.then(None, js=tabs.SCROLL_TO_STRIP_JS)


def wire_links(demo: gr.Blocks, tab_box: gr.Tabs, run: tabs.RunTab, tok: tabs.TokenizerTab, projector: gr.Checkbox):
    """The URL: opening a link restores what it holds (``ui.links``); Copy link (Run and Tokenizers tabs) writes
    the form into one. Returns the page-load event (what else runs on load follows it, with the restored values)."""
    controls = list(run.controls)

    def on_link(large, prompt, method, models, *values):
        return links.link_query("run", prompt, method, models or [], dict(zip(controls, values, strict=True)), large)

    def on_tok_link(large, text, models, show_whitespace, ids):
        return links.tokenizer_query(text, models or [], ids, show_whitespace, large)

    for button, box, handler, inputs in (
        (run.link_button, run.link_box, on_link, [projector, run.prompt, run.method, run.model_box, *run.controls.values()]),
        (tok.tok_link_button, tok.tok_link_box, on_tok_link, [projector, tok.tok_text, tok.tok_models, tok.tok_ws, tok.tok_ids]),
    ):
        shown = button.click(handler, inputs=inputs, outputs=[box], api_visibility="private", queue=False)
        shown.then(lambda url: gr.update(value=url, visible=True), inputs=[box], outputs=[box], js=links.SHARE_JS,
                   api_visibility="private", queue=False)

    restored = [tab_box, run.prompt, run.method, run.model_box, tok.tok_text, tok.tok_models, tok.tok_ws, tok.tok_ids,
                projector, *run.controls.values()]

    def on_open(request: gr.Request):
        asked = links.form_from_query(dict(getattr(request, "query_params", {}) or {}), config.MODEL_CHOICES)
        out = {c: gr.skip() for c in restored}  # (an empty dict would read as one value)
        unavailable = config.POOL.unavailable
        if unavailable:  # a model the server could not load (gemma3 without HF_TOKEN on a Space) is not a default
            out[run.model_box] = space.usable(tabs.EXAMPLES[0][2], unavailable)
            out[tok.tok_models] = space.usable(DEFAULT_MODELS, unavailable)
        out.update({run.controls[k]: v for k, v in asked.get("settings", {}).items()})
        for key, component in (("prompt", run.prompt), ("method", run.method), ("text", tok.tok_text),
                               ("tok_models", tok.tok_models), ("ws", tok.tok_ws), ("ids", tok.tok_ids), ("large", projector)):
            if key in asked:
                out[component] = asked[key]
        if "models" in asked:
            out[run.model_box] = asked["models"]
        if "tab" in asked:
            out[tab_box] = gr.Tabs(selected=asked["tab"])
        return out

    return demo.load(on_open, outputs=restored, api_visibility="private")


demo = build_app()


def launch(port: int | None = None, block: bool = True, host: str | None = None):
    """Serve the app (``block=False`` returns at once: tests and scripts use it)."""
    space.quiet_spaces_reloader(importlib.import_module("gradio.http_server"))
    served = demo.launch(
        server_name=host or os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"),
        server_port=port or int(os.environ.get("GRADIO_SERVER_PORT", "7860")),
        css=visual.CSS,
        js=links.KEYS_JS,
        # the text font declared once (visual.fonts): the exported pages embed the same one
        theme=gr.themes.Soft(font=[gr.themes.LocalFont(fonts.TEXT_FONT, weights=fonts.TEXT_WEIGHTS), *fonts.TEXT_FALLBACKS]),
        quiet=not block,
        mcp_server=config.MCP_SERVER,  # streamable HTTP at /gradio_api/mcp/ (the README shows a client's config)
        prevent_thread_lock=True,
    )
    openai_routes.add_to(demo.app)  # /v1: the ensemble as an OpenAI-compatible server (docs/serve.md)
    if block:
        demo.block_thread()
    return served


def main() -> None:
    """Serve until stopped: ``python app.py`` (a Space starts it so) and the ``ensemble-lens`` command."""
    interrupt_on_sigterm()  # `kill PID` stops the server as Ctrl-C does, and the member processes with it
    if os.environ.get("ENSEMBLE_LENS_NO_WARMUP") != "1":
        config.warm_up()
    try:
        launch()
    finally:
        close_backends()  # the member processes (and a Ray cluster this process started) end with the app


if __name__ == "__main__":
    main()
