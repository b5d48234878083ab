"""The layers stay apart: the engine never imports the views or the UI, and its modules import no cycle."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENGINE = ROOT / "ensemble"


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _top_level_imports(path: Path) -> set[str]:
    """The ``ensemble`` modules a module imports when it loads (imports inside functions run later, so they
    cannot close a cycle at import time)."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("ensemble"))
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")
            base = base[: len(base) - node.level + 1] if node.level else []
            target = ".".join([*base, *(node.module.split(".") if node.module else [])])
            if target.startswith("ensemble"):
                if node.module:  # `from . import models` loads the module, not the package being initialised
                    found.add(target)
                found.update(f"{target}.{a.name}" for a in node.names)
    return found


def test_the_engine_imports_no_view_and_no_ui():
    code = (
        "import importlib, pkgutil, sys\n"
        "import ensemble\n"
        "names = [m.name for m in pkgutil.walk_packages(ensemble.__path__, 'ensemble.') if m.name != 'ensemble.__main__']\n"
        "for name in names:\n"
        "    importlib.import_module(name)\n"
        "print(len(names), sorted(m for m in ('visual', 'gradio', 'plotly') if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    count, imported = done.stdout.split(" ", 1)
    assert int(count) > 30 and imported.strip() == "[]", done.stdout


def test_engine_modules_import_no_cycle():
    modules = {_module_name(p): p for p in ENGINE.rglob("*.py")}
    graph = {name: {t for t in _top_level_imports(path) if t in modules and t != name} for name, path in modules.items()}
    state: dict[str, int] = {}

    def visit(name: str, trail: list[str]) -> None:
        state[name] = 1
        for nxt in sorted(graph[name]):
            if state.get(nxt) == 1:
                raise AssertionError("import cycle: " + " -> ".join([*trail[trail.index(nxt) :], nxt]))
            if nxt not in state:
                visit(nxt, [*trail, nxt])
        state[name] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])


def test_response_tokens_load_without_torch():
    """The text side of a member (tokens, spans, re-sync) is torch-free, so a coordinator that only decides
    (a member backend in another process or runtime) needs no model library."""
    code = (
        "import sys\n"
        "import ensemble.response, ensemble.keys\n"
        "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]", done.stdout
