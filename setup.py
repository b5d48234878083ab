"""Build hook: the wheel carries the repository files the app reads (``ui.files.SHIPPED``) inside the ``ui``
package, where ``ui.files.project_file`` finds them once installed. Everything else is in pyproject.toml."""

import ast
import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent


def shipped() -> tuple[str, ...]:
    """``SHIPPED`` read from ui/files.py without importing the package (its imports need the dependencies)."""
    tree = ast.parse((ROOT / "ui" / "files.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "SHIPPED" for t in node.targets):
            return ast.literal_eval(node.value)
    raise RuntimeError("ui/files.py has no SHIPPED")


class BuildWithProjectFiles(build_py):
    def run(self):
        super().run()
        for relative in shipped():
            target = Path(self.build_lib) / "ui" / "_shipped" / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            if relative.endswith("/"):  # a folder (an evaluation run with its traces): copied whole
                shutil.copytree(ROOT / relative, target, dirs_exist_ok=True)
            else:
                shutil.copyfile(ROOT / relative, target)


setup(cmdclass={"build_py": BuildWithProjectFiles})
