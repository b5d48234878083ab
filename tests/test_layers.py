"""The layers stay apart: the engine never imports the views or the UI, and its modules import no cycle."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT

ENGINE = ROOT / "ensemble"


def _module_name(path: Path, root: Path = ROOT) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _type_only(node: ast.AST) -> bool:
    """``if TYPE_CHECKING:``: imports for annotations only, never run."""
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def _nodes(tree: ast.AST):
    """Every node of a module, inside functions and classes too, but not under ``if TYPE_CHECKING:``."""
    for child in ast.iter_child_nodes(tree):
        if _type_only(child):
            for other in child.orelse:
                yield other
                yield from _nodes(other)
            continue
        yield child
        yield from _nodes(child)


def _imports(path: Path, root: Path = ROOT) -> set[str]:
    """The ``ensemble`` modules a module imports, wherever the import statement stands: at the top, or inside a
    function, where it runs later and hides a cycle from a reader of the top level (the ``models -> members ->
    ray actor -> models`` circle lived there)."""
    name = _module_name(path, root)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in _nodes(ast.parse(path.read_text(encoding="utf-8"))):
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


def import_graph(root: Path = ENGINE) -> dict[str, set[str]]:
    modules = {_module_name(p, root.parent): p for p in root.rglob("*.py")}
    return {name: {t for t in _imports(path, root.parent) if t in modules and t != name} for name, path in modules.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of ``graph`` (its modules in order, the first repeated at the end), or None."""
    state: dict[str, int] = {}

    def visit(name: str, trail: list[str]) -> list[str] | None:
        state[name] = 1
        for nxt in sorted(graph[name]):
            if state.get(nxt) == 1:
                return [*trail[trail.index(nxt) :], nxt]
            if nxt not in state:
                found = visit(nxt, [*trail, nxt])
                if found:
                    return found
        state[name] = 2
        return None

    for name in sorted(graph):
        if name not in state:
            found = visit(name, [name])
            if found:
                return found
    return None


def fresh_python(code: str) -> subprocess.CompletedProcess:
    """Run ``code`` in a new interpreter at the repository root (nothing imported yet); it must succeed."""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    return done


def test_the_engine_imports_no_view_and_no_ui():
    code = (
        "import importlib, pkgutil, sys\n"
        "import ensemble\n"
        "names = [m.name for m in pkgutil.walk_packages(ensemble.__path__, 'ensemble.') if m.name != 'ensemble.__main__']\n"
        "for name in names:\n"
        "    importlib.import_module(name)\n"
        "print(len(names), sorted(m for m in ('visual', 'gradio', 'plotly') if m in sys.modules))\n"
    )
    done = fresh_python(code)
    count, imported = done.stdout.split(" ", 1)
    assert int(count) > 30 and imported.strip() == "[]", done.stdout


def test_engine_modules_import_no_cycle():
    """No cycle among the engine's modules, counting the imports inside functions: the weights cache (``models``)
    never imports where members compute (``members``), whose member processes load models."""
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_cycle_check_sees_imports_inside_functions(tmp_path):
    """The check itself: a cycle closed by a function-level import is found; one under TYPE_CHECKING is not."""
    pkg = tmp_path / "ensemble"
    (pkg / "models").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "models" / "__init__.py").write_text("from .pool import ModelPool\n")
    (pkg / "models" / "pool.py").write_text("class ModelPool:\n    def __init__(self):\n        from ..members import make_backend\n")
    (pkg / "members.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .models import ModelPool\n")
    assert find_cycle(import_graph(pkg)) is None
    (pkg / "members.py").write_text("def make_backend():\n    from .models import load\n")
    assert find_cycle(import_graph(pkg)) == ["ensemble.members", "ensemble.models", "ensemble.models.pool", "ensemble.members"]


def test_response_tokens_load_without_torch():
    """The text side of a member (tokens, spans, re-sync) is torch-free, so a coordinator that only decides
    (a member backend in another process or runtime) needs no model library."""
    code = (
        "import sys\n"
        "import ensemble.tokens.response, ensemble.tokens.key_table\n"
        "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))\n"
    )
    done = fresh_python(code)
    assert done.stdout.strip() == "[]", done.stdout


def method_name_comparisons(source: str) -> list[str]:
    """Comparisons of a method-named value (a name or attribute with ``method`` in it) with a method's name written
    as a string (``method == "safe"``, ``trace.method in ("specem", ...)``): what a method is comes from its declared
    capabilities (:mod:`ensemble.capabilities`), not from its name."""
    from ensemble.capabilities import METHODS

    def names_method(node: ast.AST) -> bool:
        named = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else ""
        return "method" in named.lower()

    def method_string(node: ast.AST) -> bool:
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            return any(method_string(e) for e in node.elts)
        return isinstance(node, ast.Constant) and node.value in METHODS

    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            if any(method_string(o) for o in operands) and any(names_method(o) for o in operands):
                found.append(ast.unparse(node))
    return found


def test_no_method_name_is_compared_as_a_string_outside_the_registry():
    """Only the registry and the capabilities table know methods by name; every other module asks a capability."""
    allowed = {ENGINE / "methods" / "registry.py", ENGINE / "capabilities.py"}
    sources = [*ENGINE.rglob("*.py"), *(ROOT / "ui").rglob("*.py"), *(ROOT / "visual").rglob("*.py"), ROOT / "app.py",
               *(ROOT / "scripts").rglob("*.py")]
    found = {str(p.relative_to(ROOT)): hits for p in sources if p not in allowed
             for hits in [method_name_comparisons(p.read_text(encoding="utf-8"))] if hits}
    assert not found, found


def test_the_method_name_check_finds_the_comparisons_it_forbids():
    assert method_name_comparisons('x = method == "safe"\ny = trace.method in ("specem", "unite")') == [
        "method == 'safe'", "trace.method in ('specem', 'unite')"]
    assert method_name_comparisons('x = fusion == "gac"\ny = method == other') == []


def runtime_name_comparisons(source: str) -> list[str]:
    """Comparisons with a runtime's name written as a string (``loaded.runtime == "llamacpp"``, ``r != "llamacpp"``,
    ``runtime in ("transformers", ...)``), and lists holding two or more runtime names (a second copy of the
    registry's): what a runtime can do comes from its declared capabilities (:mod:`ensemble.models.runtimes`)."""
    from ensemble.models.runtimes import runtime_names

    names = set(runtime_names())

    def runtime_string(node: ast.AST) -> bool:
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            return any(runtime_string(e) for e in node.elts)
        return isinstance(node, ast.Constant) and node.value in names

    def forbidden(node: ast.AST) -> bool:
        if isinstance(node, ast.Compare):
            return any(runtime_string(o) for o in [node.left, *node.comparators])
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            return sum(isinstance(e, ast.Constant) and e.value in names for e in node.elts) > 1
        return False

    return [ast.unparse(node) for node in ast.walk(ast.parse(source)) if forbidden(node)]


def test_no_runtime_name_is_compared_as_a_string_outside_the_registry():
    """Only the runtime registry knows runtimes by name; the factory, the pool, prepare, bench and the app ask it."""
    allowed = {ENGINE / "models" / "runtimes.py"}
    sources = [*ENGINE.rglob("*.py"), *(ROOT / "ui").rglob("*.py"), *(ROOT / "visual").rglob("*.py"), ROOT / "app.py",
               *(ROOT / "scripts").rglob("*.py")]
    found = {str(p.relative_to(ROOT)): hits for p in sources if p not in allowed
             for hits in [runtime_name_comparisons(p.read_text(encoding="utf-8"))] if hits}
    assert not found, found


def test_the_runtime_name_check_finds_the_comparisons_it_forbids():
    assert sorted(runtime_name_comparisons(
        'a = loaded.runtime == "llamacpp"\nb = [r for r in x if r != "transformers"]\nc = ("auto", "transformers", "llamacpp")'
    )) == ["('auto', 'transformers', 'llamacpp')", "loaded.runtime == 'llamacpp'", "r != 'transformers'"]
    assert runtime_name_comparisons('a = info["transformers"]\nb = runtime == other\nc = method == "safe"') == []


def test_what_the_views_read_loads_without_torch():
    """``visual/`` reads traces, keys, capabilities and the words for them; none of that loads a model library
    (the ``ensemble.trace`` package re-exports record.py's names, so this also covers them)."""
    code = (
        "import sys\n"
        "from ensemble.trace import RunTrace\n"
        "import ensemble.trace.read, ensemble.trace.readable, ensemble.tokens.align, ensemble.capabilities\n"
        "print(RunTrace.__module__, sorted(m for m in ('torch', 'transformers') if m in sys.modules))\n"
    )
    done = fresh_python(code)
    assert done.stdout.strip() == "ensemble.trace.record []", done.stdout


def test_the_settings_import_first():
    """``settings`` reads the trace limits (``trace.values``), which loads the trace package and its records:
    importing the settings before anything else must not meet a half-initialised module, so nothing in the trace
    package imports the settings at import time (the method names come from ``capabilities``)."""
    code = "import ensemble.settings\nfrom ensemble.trace import RunTrace\nprint(RunTrace.__name__)\n"
    done = fresh_python(code)
    assert done.stdout.strip() == "RunTrace", done.stdout


def test_the_launcher_reads_the_runtime_and_backend_names_without_torch():
    """``ensemble-lens --help`` (``ui/serve.py``) lists the registered runtimes and the backends from their one
    declaration each, and that loads no model library (the members package reads torch only for its runtimes)."""
    code = (
        "import sys\n"
        "import ui.serve\n"
        "from ensemble.members.backends import BACKENDS\n"
        "from ensemble.models.runtimes import RUNTIMES\n"
        "assert ui.serve.RUNTIMES is RUNTIMES and ui.serve.BACKENDS is BACKENDS\n"
        "print(sorted(m for m in ('torch', 'transformers', 'gradio') if m in sys.modules))\n"
    )
    done = fresh_python(code)
    assert done.stdout.strip() == "[]", done.stdout
