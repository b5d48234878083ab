"""The repository stands on its own: a Hugging Face hub accepts the push, a fresh clone needs nothing outside it.

The hub refuses binary files over 1 MB (and any file over 10 MB) that LFS does not track; a path of a development
machine or of a folder beside the checkout works on that machine only.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from tests.conftest import ROOT

BINARY_LIMIT = 1_000_000  # the hub's limit for binary files outside LFS/Xet
ANY_LIMIT = 10_000_000  # the hub's limit for any file outside LFS/Xet
# Paths that only exist on a development machine or beside the checkout; a fresh clone has none of them.
# Written in pieces so that this file does not itself hold the paths it looks for (a grep for them finds none here).
OUTSIDE = re.compile("|".join([r"\.\./" + "shared", "/" + "work/", "/home/", "/root/", "/Users/", r"[A-Za-z]:\\\\Users"]))
# Hostile names the tests feed the app on purpose (a visitor asking for a server folder), not paths the code uses.
ALLOWED = {("tests/ensemble/test_hardening.py", "/root/")}


def tracked() -> list[str]:
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout (the repository checks need git ls-files)")
    return [p for p in out.decode().split("\0") if p and (ROOT / p).is_file()]


def is_binary(data: bytes) -> bool:
    if b"\0" in data[:8192]:
        return True
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return True
    return False


def lfs_tracked(paths: list[str]) -> set[str]:
    if not paths:
        return set()
    out = subprocess.run(["git", "check-attr", "filter", "-z", "--", *paths], cwd=ROOT, capture_output=True, check=True).stdout
    fields = out.decode().split("\0")
    return {fields[i] for i in range(0, len(fields) - 2, 3) if fields[i + 2] == "lfs"}


def refused_by_hub(files: dict[str, bytes]) -> list[str]:
    """The files a hub would refuse: binary over 1 MB or anything over 10 MB, unless LFS tracks it."""
    big = [p for p, data in files.items() if len(data) > ANY_LIMIT or (len(data) > BINARY_LIMIT and is_binary(data))]
    lfs = lfs_tracked(big)
    return sorted(p for p in big if p not in lfs)


def test_no_tracked_file_is_one_a_hub_refuses():
    files = {p: (ROOT / p).read_bytes() for p in tracked()}
    assert refused_by_hub(files) == []


def test_the_check_catches_a_binary_over_a_megabyte_and_lets_text_and_small_parts_through():
    blob = bytes(range(256)) * 4000  # 1,024,000 bytes with NULs: what the old tokenizer fixtures were
    assert is_binary(blob) and not is_binary(("GSM8K é\n" * 10).encode())
    assert refused_by_hub({"tests/fixtures/x.xz": blob}) == ["tests/fixtures/x.xz"]
    assert refused_by_hub({"tests/fixtures/x.xz.00": blob[:900_000], "data.jsonl": b"{}\n" * 400_000}) == []


def test_no_tracked_file_names_a_path_outside_the_repository():
    hits = []
    for path in tracked():
        data = (ROOT / path).read_bytes()
        if is_binary(data) or path == "tests/test_repository.py":
            continue
        for number, line in enumerate(data.decode("utf-8").splitlines(), 1):
            for match in OUTSIDE.finditer(line):
                if (path, match.group()) not in ALLOWED:
                    hits.append(f"{path}:{number}: {line.strip()[:120]}")
    assert hits == []


def test_the_gsm8k_test_set_ships_with_its_licence_and_is_the_default_data():
    from ensemble.bench.measure import reasoning_prompts
    from ensemble.cli.parser import build_parser
    from ensemble.evaluation import GSM8K_TEST, load_questions

    assert GSM8K_TEST.is_relative_to(ROOT / "ensemble") and "MIT License" in (GSM8K_TEST.parent / "LICENSE").read_text()
    questions = load_questions(GSM8K_TEST)
    assert len(questions) == 1319 and questions[0].gold == "18"  # Janet's ducks
    assert json.loads(GSM8K_TEST.read_text().splitlines()[0])["question"].startswith("Janet")
    path, prompts = reasoning_prompts(None, 2, 0)
    assert Path(path).resolve() == GSM8K_TEST and len(prompts) == 2
    args = build_parser().parse_args(["evaluate", "--methods", "single:qwen", "--out", "x"])
    assert args.data is None  # filled with the shipped set when the command runs (test_evaluate runs it)


def test_a_space_installs_the_cpu_build_of_the_pinned_torch_first():
    """pre-requirements.txt (installed by a Space before requirements.txt) pins the CPU build of requirements.txt's
    torch, from PyTorch's CPU index; its pin satisfies requirements.txt's, so pip adds no CUDA build after it."""
    from packaging.requirements import Requirement
    from packaging.version import Version

    def pins(name: str) -> list[str]:
        return [line.strip() for line in (ROOT / name).read_text().splitlines() if line.strip() and not line.startswith("#")]

    pre, main = pins("pre-requirements.txt"), pins("requirements.txt")
    assert "--extra-index-url https://download.pytorch.org/whl/cpu" in pre
    cpu = Version(str(Requirement(next(p for p in pre if p.startswith("torch=="))).specifier).removeprefix("=="))
    wanted = Requirement(next(p for p in main if p.startswith("torch==")))
    assert cpu.local == "cpu" and wanted.specifier.contains(cpu)
    assert not any(line.startswith("-") for line in main)  # requirements.txt stays readable offline by make and CI


# -- the README and docs/: short, and every relative link names a file (and a heading) that exists ------------------
README = ROOT / "README.md"
README_WORDS = 2_500  # issue 27: what it is, the two commands, screenshots, methods, quick starts; the rest in docs/
LINK = re.compile(r"\]\(([^)\s]+)\)")  # a Markdown link or image: [text](target)
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def relative_links(text: str) -> list[str]:
    """The targets of the links that point into the repository: no scheme (https:, mailto:), code blocks left out."""
    return [t for t in LINK.findall(FENCE.sub("", text)) if not re.match(r"[A-Za-z][A-Za-z0-9+.-]*:", t)]


def anchors(text: str) -> set[str]:
    """The anchors GitHub gives a Markdown file's headings: lower case, punctuation dropped, spaces as hyphens,
    a repeated heading numbered."""
    found, counts = set(), {}
    for heading in re.findall(r"^#{1,6} +(.+?) *$", FENCE.sub("", text), re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        found.add(slug if not counts.get(slug) else f"{slug}-{counts[slug]}")
        counts[slug] = counts.get(slug, 0) + 1
    return found


def broken_links(page: Path) -> list[str]:
    """A page's relative links whose file, or whose heading in a Markdown file, does not exist."""
    text, broken = page.read_text(encoding="utf-8"), []
    for target in relative_links(text):
        path, _, anchor = target.partition("#")
        file = (page.parent / path) if path else page
        unknown_heading = file.suffix == ".md" and bool(anchor) and file.exists() \
            and anchor not in anchors(file.read_text(encoding="utf-8"))
        if not file.exists() or unknown_heading:
            broken.append(target)
    return broken


def test_every_relative_link_of_the_readme_and_the_docs_names_a_file_and_heading_that_exist():
    pages = [README, *sorted((ROOT / "docs").glob("*.md"))]
    broken = {str(p.relative_to(ROOT)): b for p in pages if (b := broken_links(p))}
    assert broken == {}
    assert len(relative_links(README.read_text(encoding="utf-8"))) > 20  # the screenshots and the docs are read


def test_the_link_check_catches_a_missing_file_and_a_missing_heading(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# A page\n\n## Member backends (issue 15)\n\n```text\n# not a heading\n```\n")
    page = tmp_path / "README.md"
    page.write_text("[ok](docs/a.md) [ok](docs/a.md#member-backends-issue-15) [web](https://x.org/none.md)\n"
                    "[gone](docs/b.md) [no heading](docs/a.md#not-a-heading) [self](#a-title)\n"
                    "```text\n[in code](docs/c.md)\n```\n# A title\n")
    assert broken_links(page) == ["docs/b.md", "docs/a.md#not-a-heading"]


def test_the_readme_is_short_and_links_every_doc():
    text = README.read_text(encoding="utf-8")
    assert text.startswith("---\ntitle: Ensemble Lens\n")  # the Space's front matter stays first
    words = len(text.split())
    assert words <= README_WORDS, f"README.md has {words} words; at most {README_WORDS} (move detail into docs/)"
    linked = {(ROOT / t.partition("#")[0]).resolve() for t in relative_links(text)}
    unlinked = sorted(p.name for p in (ROOT / "docs").glob("*.md") if p.resolve() not in linked)
    assert unlinked == []  # every doc is reachable from the README
