"""Measure the app as a browser sees it: time to the first streamed token and the bytes each update sends.

    python scripts/app_latency.py [--methods single,safe,specem] [--repeat 3] [--backends local,ray]

It serves the app in this process with warm models, presses Run through Gradio's queue protocol (the calls
the browser makes), and reads the streamed updates, the methods' presses interleaved. The first token counts from
the request to the first strip update that holds a token (for SAFE a drafted token being checked), "whole" to the run's
last update (the whole answer streamed); "first verified"
to the first one that holds a decided token; "first draft" (SpecEM, SAFE) to the first status line showing a model's draft, which
comes before the round's vote commits a segment; "bytes" are the sizes of the strip diffs Gradio sends (appends
only).
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import sys
import time
import uuid
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # to import the app from the project root

PROMPT = "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. How many clips did Natalia sell altogether?"


def press_run(root: str, method: str, models: list[str], max_new_tokens: int, prompt: str = PROMPT, runtime: str = "auto") -> dict:
    """Press Run the way the browser does (Gradio's queue protocol) and collect the strip's streamed diffs."""
    config = httpx.get(f"{root}/config").json()
    dep = next(d for d in config["dependencies"] if d.get("api_name") == "run_stream")
    session = uuid.uuid4().hex[:12]
    from ui.controls import control_names, initial_value  # the Run tab's engine controls, in the app's order

    chosen = {"max_new_tokens": max_new_tokens}
    settings = [chosen.get(name, initial_value(name)) for name in control_names()]
    body = {"data": [prompt, method, models, models[0], runtime, *settings], "fn_index": dep["id"],
            "trigger_id": dep["targets"][0][0], "session_hash": session, "event_data": None}
    started = time.perf_counter()
    httpx.post(f"{root}/gradio_api/queue/join", json=body).raise_for_status()
    first, verified, first_draft, diffs, final = None, None, None, [], ""
    with httpx.stream("GET", f"{root}/gradio_api/queue/data?session_hash={session}", timeout=600) as response:
        for line in response.iter_lines():
            if not line.startswith("data:"):
                continue
            message = json.loads(line[5:])
            if message.get("msg") == "process_generating":
                diff = message["output"]["data"][0]
                if diff:
                    diffs.append(diff)
                if first is None and any(op[0] == "append" and op[2] for op in diff):
                    first = time.perf_counter() - started  # the first token on the strip: a draft being checked (SAFE)
                if verified is None and any(op[0] == "append" and "el-tok" in str(op[2]) for op in diff):
                    verified = time.perf_counter() - started
                status = message["output"]["data"][1]  # SpecEM shows each draft there before its round's vote
                if first_draft is None and " drafted " in json.dumps(status):
                    first_draft = time.perf_counter() - started
            if message.get("msg") == "process_completed":
                if not message.get("success"):
                    raise RuntimeError(f"the run failed: {message}")
                final = message["output"]["data"][0]
                break
    sizes = [len(json.dumps(d)) for d in diffs]
    return {"first_token_s": first, "first_verified_s": verified, "first_draft_s": first_draft, "whole_s": time.perf_counter() - started, "diffs": diffs, "final": final, "updates": len(diffs), "bytes_sent": sum(sizes),
            "final_strip_bytes": len(final), "largest_update": max(sizes, default=0)}


def main() -> None:
    from ensemble.models import DEFAULT_ENSEMBLE

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--methods", default="single,safe,specem,unite")
    parser.add_argument("--models", default=",".join(DEFAULT_ENSEMBLE), help="the ensemble (default: %(default)s)")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--prompts", choices=("gsm8k", "same"), default="gsm8k",
                        help="gsm8k (default): a different GSM8K question of the test set (ensemble/data/gsm8k) for every press, as the "
                        "app's users bring new prompts (a llama.cpp run then shares only the template head with the last "
                        "run); same: the Natalia question every time (its whole prompt is shared)")
    parser.add_argument("--runtimes", default="auto", help="the Run tab's Runtime choice(s), measured side by side "
                        "(e.g. transformers,llamacpp); each is warmed by one untimed run first")
    parser.add_argument("--backends", default="", help="member backends measured side by side, presses interleaved "
                        "(local,ray: the app's pool is switched between presses); default: the app's own "
                        "(ENSEMBLE_LENS_BACKEND)")
    args = parser.parse_args()

    import app
    from ensemble.bench.measure import reasoning_prompts
    from ensemble.capabilities import is_one_model
    from ensemble.members import make_backend
    from ensemble.models import ModelPool
    from ui import config

    backends = [b.strip() for b in args.backends.split(",") if b.strip()] or [config.BACKEND_NAME]
    pools = {}
    for backend in backends:  # each backend's pool warmed as the app warms its own (member processes started)
        where = make_backend(backend, device=config.DEVICE)
        pools[backend] = (ModelPool(device=config.DEVICE, runtime=config.RUNTIME, weights=not where.remote), where)
        config.POOL, config.BACKEND = pools[backend]
        config.warm_up()
    presses = len(args.methods.split(",")) * len(args.runtimes.split(",")) * args.repeat
    prompts = iter(reasoning_prompts(None, presses, 0)[1] if args.prompts == "gsm8k" else [PROMPT] * presses)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    app.launch(port=port, block=False)
    root = f"http://127.0.0.1:{port}"
    models = args.models.split(",")
    runtimes = [r.strip() for r in args.runtimes.split(",") if r.strip()]
    for backend in backends:  # load each runtime's models before timing (the app loads them on first use)
        config.POOL, config.BACKEND = pools[backend]
        for runtime in runtimes:
            press_run(root, "unite", models, 2, runtime=runtime)
    print(f"{'method':<8} {'runtime':<13} {'backend':<8} {'first token (median s)':>22} {'whole':>6} {'first verified':>14} "
          f"{'first draft':>11} {'updates':>8} {'bytes sent':>11} {'final strip':>12} {'largest':>8}")
    methods = args.methods.split(",")
    runs: dict[tuple, list] = {(m, r, b): [] for m in methods for r in runtimes for b in backends}
    for i in range(args.repeat):  # the methods interleaved (each press a new prompt), their order turned each time
        for method in methods[i % len(methods):] + methods[: i % len(methods)]:
            chosen = models[:1] if is_one_model(method) else models
            for runtime in runtimes:
                prompt = next(prompts)
                for backend in backends:  # the same prompt on every backend, the backends interleaved
                    config.POOL, config.BACKEND = pools[backend]
                    runs[method, runtime, backend].append(
                        press_run(root, method, chosen, args.max_new_tokens, prompt=prompt, runtime=runtime))
    for (method, runtime, backend), done in runs.items():
        first = statistics.median(r["first_token_s"] for r in done)
        verified = statistics.median(r["first_verified_s"] for r in done)
        whole = statistics.median(r["whole_s"] for r in done)
        last = done[-1]
        drafts = [r["first_draft_s"] for r in done if r["first_draft_s"] is not None]
        shown = f"{statistics.median(drafts):.2f}" if drafts else "-"
        print(f"{method:<8} {runtime:<13} {backend:<8} {first:>22.2f} {whole:>6.2f} {verified:>14.2f} {shown:>11} {last['updates']:>8} "
              f"{last['bytes_sent']:>11} {last['final_strip_bytes']:>12} {last['largest_update']:>8}")
    app.demo.close()


if __name__ == "__main__":
    main()
