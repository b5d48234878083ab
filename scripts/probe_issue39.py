"""Issue 39's rows of the reliability probe (items 6-11: the surfaces added last), registered by
``probe_reliability.py`` as rows 39.6 to 39.11. Each builds its hostile input here and measures one thing."""

from __future__ import annotations

import io
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SINGLE = ROOT / "tests" / "fixtures" / "single.json"
FOLDER = ROOT / "tests" / "fixtures" / "evaluation" / "gsm8k-3"
TRACED_RUN = ROOT / "docs" / "results" / "gsm8k-60-traced"


def long_trace(word: str, n: int) -> dict:
    """A valid single-model trace of ``n`` tokens all ``word`` (3.8 MB at 20,000 tokens)."""
    data = json.loads(SINGLE.read_text(encoding="utf-8"))
    token = data["tokens"][0]
    data["tokens"] = [dict(token, index=i, text=word, start=len(word) * i, end=len(word) * (i + 1), topk=[[word, 0.9]])
                      for i in range(n)]
    data["text"] = word * n
    data["stats"].update(generated_tokens=n, decisions={"drafter": n})
    data["settings"]["max_new_tokens"] = n
    return data


def zip_folder(path: Path, replace: dict[str, bytes] | None = None, extra: dict[str, bytes] | None = None) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for file in sorted(FOLDER.rglob("*")):
            if file.is_file():
                relative = file.relative_to(FOLDER).as_posix()
                zf.writestr(f"e/{relative}", (replace or {}).get(relative, file.read_bytes()))
        for name, data in (extra or {}).items():
            zf.writestr(f"e/{name}", data)
    return path


def understate(path: Path, member: str) -> None:
    """The central directory says ``member`` is 10 bytes long: reading it fails its CRC."""
    data, name = bytearray(path.read_bytes()), member.encode()
    at = data.index(b"PK\x01\x02")
    while data[at + 46: at + 46 + len(name)] != name:
        at = data.index(b"PK\x01\x02", at + 4)
    struct.pack_into("<I", data, at + 24, 10)
    path.write_bytes(bytes(data))


def raw_call(url: str, endpoint: str, data: list) -> str:
    """An API call with hand-written JSON (lone surrogates as ASCII escapes, which gradio_client refuses to send):
    the event's payload."""
    import httpx

    root = url.rstrip("/")
    event = httpx.post(f"{root}/gradio_api/call/{endpoint}", content=json.dumps({"data": data}),
                       headers={"content-type": "application/json"}).json()
    stream = httpx.get(f"{root}/gradio_api/call/{endpoint}/{event['event_id']}", timeout=120).text
    return stream.split("data:", 1)[1].split("\n", 1)[0].strip() if "data:" in stream else stream


def rows(api, cli, during, page_load, scratch: Path) -> list[tuple[str, str, object, float]]:
    """The rows: (id, title, probe(ctx) -> (held, measured), time limit)."""

    def diff(ctx):
        a, b = json.dumps(long_trace(" a", 20_000)), json.dumps(long_trace(" b", 20_000))
        _, error, seconds, load = during(ctx, "/explain_answers", a, b, timeout=150)
        from ensemble.fork import compare_texts

        t0 = time.perf_counter()
        coarse = compare_texts(" a" * 20_000, " b" * 20_000).coarse
        alone = time.perf_counter() - t0
        return (error is None and seconds < 30 and load < 2 and alone < 1,
                f"two 3.8 MB traces of 20,000 tokens: answered in {seconds:.1f} s ({'error: ' + error[:60] if error else 'ok'}), "
                f"a page load meanwhile {load:.2f} s; the word diff alone {alone:.3f} s (coarse: {coarse})")

    def folder(ctx):
        from ensemble.evaluation.decision_stats import STATS_BUDGET_S
        from ui import results

        row = json.loads((FOLDER / "rows.jsonl").read_text().splitlines()[0])
        meta = json.loads((FOLDER / "meta.json").read_text())
        meta.update(question_ids=list(range(1000)), methods=["single:qwen"])
        lines = [json.dumps(dict(row, qid=i % 1000, method="single:qwen")) for i in range(200_000)]
        big = scratch / "rows-200k.zip"
        with zipfile.ZipFile(big, "w", zipfile.ZIP_DEFLATED) as zf:
            zf.writestr("e/meta.json", json.dumps(meta))
            zf.writestr("e/rows.jsonl", "\n".join(lines) + "\n")
        t0 = time.perf_counter()
        opened = results.open_evaluation(big)[2]
        grid = time.perf_counter() - t0
        meta.update(question_ids=list(range(12)))
        trace = json.dumps(long_trace(" a", 10_000)).encode()
        import gzip

        stats = scratch / "traces-12.zip"
        with zipfile.ZipFile(stats, "w", zipfile.ZIP_DEFLATED) as zf:
            zf.writestr("e/meta.json", json.dumps(meta))
            zf.writestr("e/rows.jsonl", "\n".join(json.dumps(dict(row, qid=i, method="single:qwen")) for i in range(12)) + "\n")
            for i in range(12):
                zf.writestr(f"e/traces/single%3Aqwen/{i}.json.gz", gzip.compress(trace, 1))
        t0 = time.perf_counter()
        folder12 = results.open_evaluation(stats)[2]
        seconds = time.perf_counter() - t0
        for f in (opened, folder12):
            shutil.rmtree(getattr(f, "unpacked", None) or scratch / "none", ignore_errors=True)
        return (opened is not None and grid < 30 and seconds < STATS_BUDGET_S + 15,
                f"1,000 questions x 200,000 rows ({big.stat().st_size / 1e3:.0f} KB zip) opened in {grid:.1f} s; "
                f"12 traces of 10,000 tokens ({stats.stat().st_size / 1e6:.1f} MB zip) opened in {seconds:.1f} s "
                f"(statistics budget {STATS_BUDGET_S:g} s)")

    def unpacked(ctx):
        from ui import results
        from ui.sessions import Sessions

        before = set(Path(tempfile.gettempdir()).glob(results.UNPACKED_PREFIX + "*"))
        path = zip_folder(scratch / "ok.zip", extra={"padding.json": b""})
        store = Sessions(budget_bytes=10**9)
        for _ in range(10):  # one session opens the same upload ten times
            store.get("s").evaluation = results.open_evaluation(path)[2]
        left = set(Path(tempfile.gettempdir()).glob(results.UNPACKED_PREFIX + "*")) - before
        counted = store.kept_bytes()
        store.close("s")
        gone = set(Path(tempfile.gettempdir()).glob(results.UNPACKED_PREFIX + "*")) - before
        return (len(left) == 1 and counted > 0 and not gone,
                f"10 uploads in one session: {len(left)} unpacked folder left open ({counted / 1e3:.0f} KB counted in "
                f"the sessions' budget), {len(gone)} after the page closed")

    def uploads(ctx):
        from ui import results

        good = (FOLDER / "traces" / "specem" / "1.json.gz").read_bytes()
        cases = {}
        raw = io.BytesIO()
        with zipfile.ZipFile(raw, "w") as zf:
            zf.writestr("e/meta.jsoA", "{}")
        data = bytearray(raw.getvalue().replace(b"meta.jsoA", b"meta.jso\xff"))
        for sig, off in ((b"PK\x03\x04", 6), (b"PK\x01\x02", 8)):
            at = data.index(sig) + off
            struct.pack_into("<H", data, at, struct.unpack_from("<H", data, at)[0] | 0x800)
        (scratch / "utf8.zip").write_bytes(bytes(data))
        cases["0xFF name"] = scratch / "utf8.zip"
        cases["understated size"] = zip_folder(scratch / "crc.zip")
        understate(cases["understated size"], "e/rows.jsonl")
        cases["[ x 100,000 rows"] = zip_folder(scratch / "deep-rows.zip", {"rows.jsonl": b"[" * 100_000 + b"\n{}\n"})
        cases["[ x 100,000 meta"] = zip_folder(scratch / "deep-meta.zip", {"meta.json": b"[" * 100_000})
        cases["bad deflate trace"] = zip_folder(scratch / "zlib.zip", {"traces/specem/1.json.gz": good[:20] + bytes(40) + good[60:]})
        said, held = [], True
        for name, path in cases.items():
            view, _, opened = results.open_evaluation(path)
            text = view.results_view
            plain = "Traceback" not in text and results.UNPACKED_PREFIX not in text and tempfile.gettempdir() not in text
            ok = (opened is not None and opened.readable_trace(1, "specem") is None) if name == "bad deflate trace" else (
                opened is None and plain and "el-error" in text)
            held &= ok
            said.append(f"{name}: {'opened, trace missing' if opened is not None else 'one sentence'}{'' if ok else ' (FELL SHORT)'}")
            if opened is not None:
                shutil.rmtree(opened.unpacked, ignore_errors=True)
        return held, "; ".join(said)

    def interrupt(ctx):
        t0 = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "tests/ensemble/models/test_gguf_interrupt.py"],
                              cwd=ROOT, capture_output=True, text=True, timeout=170)
        tail = [line for line in done.stdout.splitlines() if line.strip()][-1:]
        return done.returncode == 0 and "skipped" not in " ".join(tail), f"Ctrl-C inside llama.cpp's log callback: {' '.join(tail)} ({time.perf_counter() - t0:.0f} s)"

    def messages(ctx):
        out = {}
        forced = raw_call(ctx.url, "fork", [json.loads(SINGLE.read_text()), 0, "", "a\ud800"])
        out["force lone surrogate"] = forced[:90]
        result, err, _ = api(ctx, "/explain_run", "23", "single:qwen,safe-unite", timeout=60)
        out["explain_run '23'"] = "answered" if result else (err or "")[:70]
        work = scratch / "cli-folder"
        shutil.copytree(FOLDER, work)
        (work / "meta.json").unlink()
        os.symlink("/dev/zero", work / "meta.json")
        code, _, err, seconds = cli("report", str(work), timeout=60)
        out["meta.json -> /dev/zero"] = f"exit {code} in {seconds:.1f} s"
        (work / "meta.json").unlink()
        shutil.copy(FOLDER / "meta.json", work / "meta.json")
        (work / "rows.jsonl").unlink()
        os.mkfifo(work / "rows.jsonl")
        code2, _, err2, seconds2 = cli("explain", str(work), "--qid", "0", "--methods", "single:qwen,specem", timeout=60)
        out["rows.jsonl a pipe"] = f"exit {code2} in {seconds2:.1f} s"
        (work / "rows.jsonl").unlink()
        shutil.copy(FOLDER / "rows.jsonl", work / "rows.jsonl")
        outside = scratch / "outside"
        outside.mkdir(exist_ok=True)
        os.symlink(outside, work / "answers")
        code3, _, err3, _ = cli("report", str(work), "--answer-pages", "all", timeout=120)
        written = list(outside.rglob("*"))
        out["answers -> outside"] = f"exit {code3}, {len(written)} file(s) written outside"
        held = ("lone surrogate" in forced and "TextInputSequence" not in forced and out["explain_run '23'"] == "answered"
                and code not in (0, None) and code2 not in (0, None) and code3 not in (0, None) and not written
                and not any("Traceback" in e for e in (err, err2, err3)))
        return held, "; ".join(f"{k}: {v}" for k, v in out.items())

    return [("39.6", "every text diff bounded: /explain_answers on two 20,000-token traces, a page load meanwhile", diff, 170),
            ("39.7", "a small zip cannot hold a worker: 200,000 rows, and 12 traces of 10,000 tokens", folder, 170),
            ("39.8", "unpacked uploads removed when replaced or closed, and counted in the sessions' budget", unpacked, 60),
            ("39.9", "hostile zips (0xFF name, understated size, [ x 100,000, bad deflate): one sentence or opened", uploads, 60),
            ("39.10", "Ctrl-C inside llama.cpp's log callback ends the program (its test)", interrupt, 180),
            ("39.11", "force with a lone surrogate, qid '23', /dev/zero and pipe files, an answers symlink", messages, 240)]
