"""Re-run issue 26's probe matrix against this checkout: the app served on loopback, its API, the CLI, a copy of
the model cache. One line per row: tried / held / fell short, with what was measured.

    python scripts/probe_reliability.py                 # every row (about 5-10 minutes on 2 cores)
    python scripts/probe_reliability.py --only 1,5,6    # some rows (ids as printed)
    python scripts/probe_reliability.py --url http://127.0.0.1:7860/   # an app already running (loopback)
    python scripts/probe_reliability.py --pytest --budget 1800   # also the rows that re-run browser/Ray tests

Rows that need a browser or a Ray member kill re-run the repository's own tests on them (``--pytest``); without it
they print "not tried". Every row has its own time limit and starts only when that limit fits in what is left of
``--budget`` (570 s), so the script ends within it.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
FIRST_VIEW = ROOT / "assets" / "first-view.json"
SPECEM = ROOT / "tests" / "fixtures" / "specem.json"
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
SCRATCH = Path(tempfile.mkdtemp(prefix="probe-reliability-"))  # large files and the app's log (kept for a failing row)
ROWS: list[tuple[str, str, object, float]] = []  # (id, title, probe(ctx) -> (held, measured), its time limit)


def row(rid: str, title: str, limit: float = 90, holds_server: bool = False):
    """``holds_server``: a row whose input held the server for a long time before the fix; run last, so that on an
    unfixed app it cannot make the other rows time out."""

    def register(fn):
        ROWS.append((rid, title, fn, limit + (10_000 if holds_server else 0)))
        return fn

    return register


# -- helpers ----------------------------------------------------------------------------------------------------
def cli(*args: str, timeout: float = 120, env: dict | None = None, limit_file: int | None = None):
    """``python -m ensemble ARGS``: (exit code, stdout, stderr, seconds); ``limit_file`` caps the size of any file
    it writes (RLIMIT_FSIZE: a write past it fails as on a full disk)."""

    def cap():
        if limit_file is not None:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit_file, limit_file))

    t0 = time.perf_counter()
    try:
        done = subprocess.run([sys.executable, "-m", "ensemble", *args], cwd=ROOT, capture_output=True, text=True,
                              timeout=timeout, env={**os.environ, **(env or {})}, preexec_fn=cap)
    except subprocess.TimeoutExpired:
        return None, "", f"timed out after {timeout:.0f} s", time.perf_counter() - t0
    return done.returncode, done.stdout, done.stderr, time.perf_counter() - t0


def one_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return (lines[-1] if lines else "")[:140]


def page_load(url: str, timeout: float = 60) -> float:
    t0 = time.perf_counter()
    with urllib.request.urlopen(url, timeout=timeout) as reply:
        reply.read()
    return time.perf_counter() - t0


def api(ctx, endpoint: str, *args, timeout: float = 60):
    """(result or None, error text or None, seconds) of one API call."""
    t0 = time.perf_counter()
    job = ctx.client.submit(*args, api_name=endpoint)
    try:
        return job.result(timeout=timeout), None, time.perf_counter() - t0
    except cf.TimeoutError:
        return None, f"no answer in {timeout:.0f} s", time.perf_counter() - t0
    except Exception as exc:  # noqa: BLE001 - gradio_client raises AppError with the server's message
        return None, str(exc).strip() or type(exc).__name__, time.perf_counter() - t0


def during(ctx, endpoint: str, *args, timeout: float = 60) -> tuple[object, str | None, float, float]:
    """An API call and, while it runs, a page load: (result, error, call seconds, page-load seconds)."""
    pool = cf.ThreadPoolExecutor(1)
    call = pool.submit(api, ctx, endpoint, *args, timeout=timeout)
    time.sleep(0.3)
    try:
        load = page_load(ctx.url, timeout=timeout)
    except OSError:  # no page in the whole time limit
        load = float("inf")
    result, error, seconds = call.result()
    pool.shutdown()
    return result, error, seconds, load


def trace_text(path: Path = FIRST_VIEW) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def server_rss(ctx) -> float | None:
    import psutil

    if ctx.proc is None:
        return None
    return psutil.Process(ctx.proc.pid).memory_info().rss / 1e6


def pytest_row(ctx, *args: str, timeout: float = 420):
    if not ctx.pytest:
        return None, "not tried (re-runs tests: pass --pytest)"
    t0 = time.perf_counter()
    try:
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", *args], cwd=ROOT,
                              capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return False, f"pytest {' '.join(args)}: no result in {timeout:.0f} s"
    return done.returncode == 0, f"pytest {' '.join(args)}: {one_line(done.stdout)} ({time.perf_counter() - t0:.0f} s)"


# -- the numbered findings --------------------------------------------------------------------------------------
@row("1", "60 KB of escaped quotes does not hold the server; a 1 MB one parses or is refused fast", limit=60, holds_server=True)
def quotes(ctx):
    _, _, seconds, load = during(ctx, "/explain_token", '"' + '\\"' * 30000, 0, timeout=20)
    big = SCRATCH / "quotes.json"
    big.write_text('"' + '\\"' * 500_000)
    code = "import sys,time; from ensemble.trace import RunTrace\nt=time.perf_counter()\ntry: RunTrace.from_json(open(sys.argv[1]).read())\nexcept Exception: pass\nprint(time.perf_counter()-t)"
    try:
        done = subprocess.run([sys.executable, "-c", code, str(big)], cwd=ROOT, capture_output=True, text=True, timeout=30)
        mb = float(done.stdout.strip() or "nan")
    except subprocess.TimeoutExpired:
        mb = float("inf")
    finally:
        big.unlink(missing_ok=True)
    return seconds < 1 and load < 1 and mb < 1, f"60 KB: answered in {seconds:.2f} s, a page load meanwhile {load:.2f} s; 1 MB parse {mb:.2f} s"


@row("2", "lone surrogates in a trace: every endpoint answers with text or a one-line reason")
def surrogates(ctx):
    out = []
    for where in ("token", "prompt", "model", "topk"):
        data = trace_text()
        if where == "token":
            data["tokens"][0]["text"] = "bad \ud800"
        elif where == "prompt":
            data["prompt"] = "bad \ud800 prompt"
        elif where == "model":
            data["tokens"][0]["model"] = data["models"][0] = "q\ud800"
        else:
            data["tokens"][0]["topk"][0][0] = "k\ud800"
        result, error, _ = api(ctx, "/explain_token", json.dumps(data), 0)
        bare = not result and (error or "").strip().rstrip(".").lower() in ("", "error", "none")
        late = not result and (error or "").startswith("no answer in")
        out.append((where, "answered" if result else "bare Error" if bare else "NO ANSWER" if late else f"refused ({_short(error)})"))
    held = all(v not in ("bare Error", "NO ANSWER") for _, v in out)
    return held, ", ".join(f"{w}: {v}" for w, v in out)


def _short(error: str | None, width: int = 60) -> str:
    text = " ".join((error or "").split())
    return text if len(text) <= width else text[: width - 1] + "…"


@row("3", "18 MB trace with 900,000 top-k pairs in one token: answered or refused in well under a second", limit=150,
     holds_server=True)
def big_topk(ctx):
    data = trace_text()
    data["tokens"][0]["topk"] = [[f"k{i}", 1e-7] for i in range(900_000)]
    text = json.dumps(data)
    _, error, seconds, load = during(ctx, "/explain_token", text, 0, timeout=120)
    return seconds < 2 and load < 1, f"{len(text) / 1e6:.1f} MB: answered in {seconds:.2f} s ({'refused' if error else 'accepted'}), page load meanwhile {load:.2f} s"


@row("4", "uploaded traces per session are bounded by size (a large trace uploaded in 6 browser sessions)", limit=240)
def session_memory(ctx):
    if ctx.proc is None or not os.path.exists(CHROMIUM):
        return None, f"not tried: needs {CHROMIUM} and the app started by this script"
    from playwright.sync_api import sync_playwright

    from ensemble.trace.values import MAX_PAIRS

    data = trace_text()  # as large as a trace may be where it matters: every token's top-k list at its 5,000 cap
    for i, token in enumerate(data["tokens"]):
        token["topk"] = [[f"k{i}-{j}", 1e-7] for j in range(MAX_PAIRS)]
    path = SCRATCH / "large-trace.json"
    path.write_text(json.dumps(data))
    before, outcome = None, []
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=["--headless", "--no-sandbox", "--disable-gpu"])
            for session in range(8):
                if session == 2:  # measured from after two uploads: what the app loads once, lazily with
                    time.sleep(1)  # ENSEMBLE_LENS_NO_WARMUP (about 700 MB over the first two here), is no session's
                    before, outcome = server_rss(ctx), []
                context = browser.new_context()
                page = context.new_page()
                page.set_default_timeout(120_000)
                page.goto(ctx.url)
                page.get_by_role("tab", name="Trace").click()
                page.locator("#upload input[type=file]").set_input_files(str(path))
                page.get_by_role("tab", name="Run").click()
                # accepted: the Run tab replays it; refused: the reason shows in the Trace tab, beside the file
                page.wait_for_function("() => /Replaying|⚠️/.test(document.querySelector('#status')?.textContent || '')"
                                       " || /refused|limit|at most/i.test(document.querySelector('#trace-status')?.textContent || '')")
                replayed = "Replaying" in (page.locator("#status").text_content() or "")
                outcome.append("replayed" if replayed else "refused")
                context.close()
            browser.close()
    finally:
        path.unlink(missing_ok=True)
    time.sleep(2)
    after = server_rss(ctx)
    size = len(json.dumps(data)) / 1e6
    return (after - before < 300 and outcome.count("replayed") == 6,
            f"server RSS {before:.0f} MB -> {after:.0f} MB after 6 sessions of a {size:.1f} MB upload ({', '.join(outcome)})")


@row("5", "--member-resources qwen=CPU:1 runs (the resources make auto pick Ray)", limit=270)
def member_resources(ctx):
    results = []
    for extra in (["--backend", "auto"],):  # resources make auto pick Ray: the same path as --backend ray
        code, _, err, seconds = cli("generate", "--method", "safe", "--models", "qwen,smollm2", "--member-resources",
                                    "qwen=CPU:1", "--prompt", "hi", "--max-new-tokens", "4", *extra, timeout=250)
        results.append((extra, code, one_line(err), seconds))
    held = all(code == 0 for _, code, _, _ in results)
    return held, "; ".join(f"{' '.join(e) or 'auto'}: exit {c} in {s:.0f} s" + ("" if c == 0 else f" ({m})") for e, c, m, s in results)


@row("6", "outputs: a full disk names the file and leaves none, --json still prints, one file for --out and --html refused", limit=150)
def outputs(ctx):
    folder = Path(tempfile.mkdtemp(prefix="probe-out-"))
    try:
        target = folder / "trace.json"
        code, out, err, _ = cli("generate", "--models", "smollm2", "--prompt", "Say hi.", "--max-new-tokens", "8", "--json",
                                "--out", str(target), limit_file=2000, timeout=300)
        printed = out.strip().startswith("{")
        left = sorted(p.name for p in folder.iterdir())
        full = code not in (0, None) and "trace.json" in err and printed and not left
        same, _, err2, seconds = cli("generate", "--models", "smollm2", "--prompt", "hi", "--out", str(folder / "s.json"),
                                     "--html", f"{folder}/./s.json", timeout=120)
        refused = same == 2 and "same file" in err2 and not (folder / "s.json").exists()
        return full and refused, (f"full disk: exit {code}, trace printed {printed}, files left {left}, message "
                                  f"{one_line(err)!r}; same file: exit {same} in {seconds:.1f} s")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@row("7", "values outside their domain refused: --dtype float8, probabilities, schema 2.0, a round without candidates, --models /etc", limit=90)
def domains(ctx):
    checks = {}
    code, _, err, _ = cli("generate", "--dtype", "float8", "--prompt", "hi", timeout=60)
    checks["--dtype float8"] = code == 2
    code, _, err, _ = cli("generate", "--models", "/etc", "--method", "single", "--prompt", "hi", timeout=60)
    checks["--models /etc"] = code == 2 and "Unknown model" in err and len(err.strip().splitlines()) == 1
    for name, change in {
        "p=-999999999": lambda d: d["tokens"][0]["topk"][0].__setitem__(1, -999999999),
        "p=1e15": lambda d: d["tokens"][0]["topk"][0].__setitem__(1, 1e15),
        "schema 2.0": lambda d: d.__setitem__("schema_version", 2.0),
    }.items():
        data = trace_text()
        change(data)
        result, _, _ = api(ctx, "/explain_token", json.dumps(data), 0)
        checks[name] = result is None
    data = trace_text(SPECEM)
    data["rounds"][0].update(candidates=[], scores=[], aggregate=[])  # the winner stays: a round that chose nothing
    result, _, _ = api(ctx, "/explain_token", json.dumps(data), 0)
    checks["round without candidates"] = result is None
    return all(checks.values()), ", ".join(f"{k}: {'refused' if v else 'ACCEPTED'}" for k, v in checks.items())


@row("8", "models --verify finds a flipped byte in the llama.cpp GGUF copy")
def verify(ctx):
    from ensemble import models
    from ensemble.models import cache

    spec = models.EMBEDDED["smollm2"]
    source = cache.gguf_cache(spec)
    if not (source / "manifest.json").exists():
        return None, f"not tried: {source} is not prepared (python -m ensemble prepare smollm2 --runtime llamacpp)"
    folder = Path(tempfile.mkdtemp(prefix="probe-cache-"))
    try:
        copy = folder / source.name
        shutil.copytree(source, copy)
        gguf = copy / "model.gguf"
        with gguf.open("r+b") as fh:
            fh.seek(200_000)  # between two sampled blocks: only the full check reads it
            byte = fh.read(1)
            fh.seek(200_000)
            fh.write(bytes([byte[0] ^ 1]))
        code, _, err, seconds = cli("models", "--verify", env={"ENSEMBLE_LENS_CACHE": str(folder)}, timeout=120)
        named = f"{copy} fails" in err and "model.gguf" in err  # it names the GGUF folder and the file
        return code == 1 and named, f"exit {code} in {seconds:.1f} s: {one_line(err)!r}"
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@row("9", "Stop: no token after the click (engine on every method, app strip; SpecEM in the browser with --pytest)", limit=450)
def stop(ctx):
    held, said = pytest_row(ctx, "tests/ensemble/methods/test_stop.py", "-k", "pass_that_ends or apps_strip", timeout=420)
    if held and ctx.pytest:
        browser, more = pytest_row(ctx, "tests/browser/test_browser.py", "-k", "specem_stop", timeout=420)
        return bool(browser), f"{said}; {more}"
    return held, said


@row("10", "a member that dies mid-run: the API caller gets the trace so far, the views keep their stats", limit=300)
def member_died(ctx):
    return pytest_row(ctx, "tests/ensemble/methods/test_stop.py", "-k", "member", timeout=300)


@row("11", "API messages say what to fix (settings not JSON, fork at='x', explain_token index='1')", limit=150)
def messages(ctx):
    trace = FIRST_VIEW.read_text(encoding="utf-8")
    raw = ("Expecting value", "invalid literal", "is not in this trace")
    seen = {}
    _, err, _ = api(ctx, "/run_ensemble", "hi", "single", "smollm2", "not json")
    seen["settings"] = err or "accepted"
    _, err, _ = api(ctx, "/fork", json.loads(trace), "x", "single", timeout=120)
    seen["fork at"] = err or "accepted"
    result, err, _ = api(ctx, "/explain_token", trace, "1")
    seen["index '1'"] = "answered" if result else err
    held = all(not any(r in v for r in raw) for v in seen.values())
    return held, "; ".join(f"{k}: {v[:70]!r}" for k, v in seen.items())


# -- what held and must stay ------------------------------------------------------------------------------------
@row("H1", "model names that are paths all get the same Unknown model (API)")
def paths(ctx):
    messages = set()
    for name in ("/etc", "/no/such/folder", "~", "../..", "/proc/self"):
        _, err, _ = api(ctx, "/run_ensemble", "hi", "single", name, "{}")
        messages.add((err or "accepted").replace(repr(name), "NAME"))
    first = next(iter(messages))
    return len(messages) == 1 and "Unknown model" in first, f"{len(messages)} distinct message(s): {_short(first, 90)!r}"


@row("H2", "8 concurrent API clients each get their solo result", limit=240)
def concurrent(ctx):
    prompts = [f"Count to {n}." for n in range(3, 11)]
    settings = json.dumps({"max_new_tokens": 6})
    solo = {p: api(ctx, "/run_ensemble", p, "single", "smollm2", settings, timeout=300)[0] for p in prompts[:2]}
    with cf.ThreadPoolExecutor(8) as pool:
        together = dict(zip(prompts, pool.map(lambda p: api(ctx, "/run_ensemble", p, "single", "smollm2", settings, timeout=300)[0], prompts), strict=True))
    same = all(together[p] and solo[p] and together[p]["text"] == solo[p]["text"] for p in solo)
    answered = sum(1 for r in together.values() if r)
    return same and answered == 8, f"{answered}/8 answered, solo text equal for {len(solo)} checked: {same}"


@row("H3", "RSS flat over 15 runs", limit=300)
def rss(ctx):
    if ctx.proc is None:
        return None, "not tried: the app was not started by this script (--url)"
    settings = json.dumps({"max_new_tokens": 8})
    api(ctx, "/run_ensemble", "Say hi.", "safe", "qwen,smollm2", settings, timeout=300)
    before = server_rss(ctx)
    for i in range(15):
        api(ctx, "/run_ensemble", f"Say hi {i}.", "safe", "qwen,smollm2", settings, timeout=300)
    after = server_rss(ctx)
    return after - before < 150, f"{before:.0f} MB -> {after:.0f} MB"


@row("H4", "0 CLI tracebacks over bad invocations", limit=150)
def tracebacks(ctx):
    bad = [["generate", "--temperature", "nan", "--prompt", "x"], ["generate", "--models", "", "--prompt", "x"],
           ["tokenize", "--file", "/nonexistent"], ["fork", str(FIRST_VIEW), "--at", "999", "--method", "single"],
           ["evaluate", "--data", "/etc/hostname", "--methods", "single:smollm2", "--out", "/proc/x"],
           ["report", "/"], ["bench", "--only", "nope"], ["generate", "--prompt", "x", "--weights", "a=b"]]
    with cf.ThreadPoolExecutor(4) as pool:
        errors = list(pool.map(lambda a: cli(*a, timeout=120)[2], bad))
    found = [" ".join(a) for a, err in zip(bad, errors, strict=True) if "Traceback" in err]
    return not found, f"{len(found)} traceback(s) over {len(bad)} invocations" + (f": {found}" if found else "")


@row("H5", "no response ends in U+FFFD (emoji / CJK prompts)", limit=240)
def fffd(ctx):
    prompts = ["Reply with three emoji: 🙂", "用一句话介绍普罗夫迪夫。", "Describe 👩‍💻🇧🇬 briefly.", "東京はどこですか？"]
    ends = 0
    for p in prompts:
        result, _, _ = api(ctx, "/run_ensemble", p, "unite", "qwen,smollm2", json.dumps({"max_new_tokens": 12}), timeout=300)
        ends += bool(result and result["text"].endswith("\ufffd"))
    return ends == 0, f"{ends} of {len(prompts)} responses end in U+FFFD"


@row("H6", "cache faults detected and rebuilt byte-identical; a killed Ray member is named in the browser", limit=450)
def cache_and_ray(ctx):
    held, said = pytest_row(ctx, "tests/ui/test_reliability.py", "-k", "cache_fault", timeout=300)
    if not ctx.pytest:
        return held, said
    ray, more = pytest_row(ctx, "tests/ui/test_app_ray.py", "-k", "killed", timeout=420)
    return bool(held and ray), f"{said}; {more}"


from probe_issue39 import rows as issue39_rows  # noqa: E402 - issue 39's rows (39.6-39.11) use the helpers above

ROWS.extend(issue39_rows(api, cli, during, page_load, SCRATCH))


# -- running ----------------------------------------------------------------------------------------------------
class Context:
    def __init__(self, url: str, proc, pytest: bool):
        from gradio_client import Client

        self.url, self.proc, self.pytest = url, proc, pytest
        self.client = Client(url, verbose=False)


def start_app() -> tuple[str, subprocess.Popen]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # no warm-up: the app serves in seconds and each model loads at its first run (a row's time includes it)
    env = dict(os.environ, GRADIO_SERVER_PORT=str(port), GRADIO_SERVER_NAME="127.0.0.1", ENSEMBLE_LENS_BACKEND="local",
               GRADIO_ANALYTICS_ENABLED="False", ENSEMBLE_LENS_NO_WARMUP="1")
    log = open(SCRATCH / "app.log", "w")  # noqa: SIM115 - the app's output, kept for a failing row
    proc = subprocess.Popen([sys.executable, "app.py"], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/"
    deadline = time.time() + 300
    while time.time() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the app exited with {proc.returncode}; see {SCRATCH / 'app.log'}")
        try:
            page_load(url, timeout=2)
            return url, proc
        except OSError:
            time.sleep(1)
    proc.terminate()
    raise SystemExit(f"the app did not serve in 300 s; see {SCRATCH / 'app.log'}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="an app already running on this machine (loopback); default: start one")
    parser.add_argument("--only", help="comma list of row ids (1-11, H1-H6, 39.6-39.11)")
    parser.add_argument("--pytest", action="store_true", help="also rows that re-run the browser, Ray and cache tests")
    parser.add_argument("--budget", type=float, default=570,
                        help="seconds for the whole run, the app's start included: a row starts only if its own time "
                        "limit fits in what is left (default 570)")
    args = parser.parse_args()
    if args.url and not args.url.startswith(("http://127.0.0.1", "http://localhost")):
        raise SystemExit("--url must be on this machine (http://127.0.0.1:PORT/)")
    wanted = {r.strip() for r in args.only.split(",")} if args.only else None
    started = time.perf_counter()
    url, proc = (args.url, None) if args.url else start_app()
    print(f"probing {url} ({'started here' if proc else 'already running'}); {time.perf_counter() - started:.0f} s to serve")
    ctx = Context(url, proc, args.pytest)
    counts = {"held": 0, "fell short": 0, "not tried": 0}
    try:
        # the quick rows first; a row starts only when its own limit still fits in the budget
        for rid, title, probe, order in sorted(ROWS, key=lambda r: r[3]):
            if wanted is not None and rid not in wanted:
                continue
            limit = order % 10_000
            if time.perf_counter() - started + limit > args.budget:
                verdict, measured = None, f"not tried (its {limit:.0f} s do not fit in what is left of --budget)"
            else:
                result: dict = {}
                worker = threading.Thread(target=lambda p=probe, r=result: r.update(out=_safely(p, ctx)), daemon=True)
                worker.start()
                worker.join(timeout=limit)
                verdict, measured = result.get("out", (False, f"no result in its {limit:.0f} s"))
            word = "held" if verdict else "not tried" if verdict is None else "fell short"
            counts[word] += 1
            print(f"{rid:<4} {word:<11} {title} | {measured}", flush=True)
    finally:
        if proc is not None:
            proc.terminate()
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
    print(f"-- {counts['held']} held, {counts['fell short']} fell short, {counts['not tried']} not tried "
          f"in {time.perf_counter() - started:.0f} s")
    return 1 if counts["fell short"] else 0


def _safely(probe, ctx):
    try:
        return probe(ctx)
    except Exception as exc:  # noqa: BLE001 - one row's failure is its own verdict, the others still run
        return False, f"the probe itself failed: {type(exc).__name__}: {str(exc)[:160]}"


if __name__ == "__main__":
    sys.exit(main())
