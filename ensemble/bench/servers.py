"""``bench --only servers``: SAFE with members on llama.cpp's OpenAI-compatible server against the same members in
process (llama.cpp, one thread each on both sides), time per token side by side, the bytes each member's requests
and answers take per token, and the HTTP round trip each request costs."""

from __future__ import annotations

import contextlib
import statistics
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator

from ..errors import EnsembleError
from .measure import log


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def llama_servers(names: list[str], threads: int = 1, wait_s: float = 180.0) -> Iterator[dict[str, str]]:
    """``python -m llama_cpp.server`` on each embedded model's GGUF (prepared in the cache), ``threads`` threads
    each, prompt rows kept (``--logits_all true``); yields ``{name: base URL}`` and stops them afterwards."""
    from ..models import EMBEDDED, prepare_gguf, quiet_progress

    started: dict[str, tuple[subprocess.Popen, str]] = {}
    try:
        for name in names:
            if name not in EMBEDDED:
                raise EnsembleError(f"The servers section starts llama.cpp servers on the embedded models; {name!r} is not one.")
            port = _free_port()
            gguf = prepare_gguf(name, quiet_progress) / "model.gguf"
            proc = subprocess.Popen(
                [sys.executable, "-m", "llama_cpp.server", "--model", str(gguf), "--host", "127.0.0.1", "--port",
                 str(port), "--n_threads", str(threads), "--n_threads_batch", str(threads), "--logits_all", "true",
                 "--n_ctx", "2048"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )
            started[name] = (proc, f"http://127.0.0.1:{port}/v1")
        for name, (proc, url) in started.items():
            deadline = time.monotonic() + wait_s
            while True:
                try:
                    urllib.request.urlopen(url + "/models", timeout=2).read()
                    break
                except OSError:
                    if proc.poll() is not None or time.monotonic() > deadline:
                        raise EnsembleError(f"llama_cpp.server for {name} did not start.") from None
                    time.sleep(0.3)
        yield {name: url for name, (_, url) in started.items()}
    finally:
        for proc, _ in started.values():
            proc.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)
            if proc.poll() is None:
                proc.kill()


def round_trip_s(url: str, n: int = 20) -> float:
    """The median seconds of a request that computes nothing (``GET /v1/models``): HTTP's own cost per request."""
    times = []
    for _ in range(n):
        t = time.perf_counter()
        urllib.request.urlopen(url + "/models", timeout=10).read()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def bench_servers(local: list, remote: list, urls: dict[str, str], prompts: list[str], budget: int, lookahead: int,
                  repeat: int) -> dict:
    """SAFE in process (llama.cpp, one thread per member) and on the servers, interleaved, best of ``repeat`` per
    prompt: seconds per token of each, the server's over the in-process, bytes per member per token, requests per
    round and the HTTP round trip per round (requests per round times a request's own round trip)."""
    from dataclasses import replace

    from ..members.local import THREADS
    from ..methods import EnsembleRun
    from ..settings import Settings

    settings = Settings(max_new_tokens=budget, lookahead=lookahead)
    best: dict[tuple[str, int], tuple[float, object]] = {}
    for _ in range(repeat):
        for label, members, backend in (("in_process", local, THREADS), ("on_servers", remote, None)):
            for p, prompt in enumerate(prompts):
                job = EnsembleRun(members, prompt, "safe", settings, **({"backend": backend} if backend else {}))
                for adapter in job.adapters:  # one thread per member, as each server has
                    adapter.configure(replace(adapter.policy, threads=1))
                t = time.perf_counter()
                for _ in job.events():
                    pass
                elapsed = time.perf_counter() - t
                log(f"servers {label}, prompt {p + 1}/{len(prompts)}: {job.trace.stats.generated_tokens} tokens in {elapsed:.1f} s")
                if (label, p) not in best or elapsed < best[(label, p)][0]:
                    best[(label, p)] = (elapsed, job.trace)
    out: dict = {}
    for label, remote_side in (("in_process", False), ("on_servers", True)):
        runs = [best[(label, p)] for p in range(len(prompts))]
        traces = [t for _, t in runs]
        tokens = max(1, sum(t.stats.generated_tokens for t in traces))
        rounds = max(1, sum(t.stats.rounds for t in traces))
        row = {"s_per_token": round(sum(e for e, _ in runs) / tokens, 4), "tokens": tokens, "rounds": rounds,
               "text_same": None}
        if remote_side:
            names = traces[0].models
            row["bytes_per_token"] = {n: round(sum(t.stats.member_bytes.get(n, 0) for t in traces) / tokens) for n in names}
            row["whole_row_bytes_per_token"] = {n: round(sum(t.stats.member_row_bytes.get(n, 0) for t in traces) / tokens) for n in names}
            row["requests_per_round"] = {n: round(sum(t.stats.forward_passes.get(n, 0) for t in traces) / rounds, 2) for n in names}
        out[label] = row
    same = [best[("in_process", p)][1].text == best[("on_servers", p)][1].text for p in range(len(prompts))]
    out["on_servers"]["text_same"] = out["in_process"]["text_same"] = sum(same)
    out["ratio_server_to_in_process"] = round(out["on_servers"]["s_per_token"] / out["in_process"]["s_per_token"], 3)
    trip = {name: round(round_trip_s(url), 5) for name, url in urls.items()}
    out["round_trip_s"] = trip
    out["http_s_per_round"] = round(sum(trip[n] * out["on_servers"]["requests_per_round"].get(n, 0) for n in trip), 4)
    out["prompts"] = len(prompts)
    return out


def server_lines(report: dict) -> list[str]:
    r = report["servers"]
    a, b = r["in_process"], r["on_servers"]
    return [
        f"\nSAFE on llama.cpp servers vs in process (one thread per member each side; {r['prompts']} GSM8K question(s), "
        f"{a['tokens']} tokens; same text on {a['text_same']} of {r['prompts']})",
        f"  in process  {a['s_per_token']:.4f} s/token",
        f"  servers     {b['s_per_token']:.4f} s/token   x{r['ratio_server_to_in_process']:.3f} of in process",
        f"  bytes per token (requests + answers): {b['bytes_per_token']}  (whole float32 rows would be {b['whole_row_bytes_per_token']})",
        f"  requests per round: {b['requests_per_round']}; HTTP round trip per request {r['round_trip_s']} s -> "
        f"{r['http_s_per_round']} s per round",
    ]
