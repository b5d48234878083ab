"""Every method's trace on the tiny models equals its golden file (timings stripped): a refactor of the engine
changes no decision, no number and no record (rewrite them with ``make_fixtures.py --golden`` on purpose only)."""

from __future__ import annotations

import json
import math

import pytest

from tests.conftest import FIXTURES
from tests.golden_runs import RUNS, golden_run

GOLDEN = FIXTURES / "golden"


def _same(got, want, where: str = "trace") -> None:
    """Equal data, floats to 1e-5 relative (another CPU's kernels may round a last digit differently)."""
    if isinstance(want, float) and isinstance(got, float | int):
        assert math.isclose(got, want, rel_tol=1e-5, abs_tol=1e-7), f"{where}: {got} != {want}"
    elif isinstance(want, dict):
        assert isinstance(got, dict) and sorted(got) == sorted(want), f"{where}: keys {sorted(got)} != {sorted(want)}"
        for key in want:
            _same(got[key], want[key], f"{where}.{key}")
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), f"{where}: {got!r} != {want!r}"
        for i, (a, b) in enumerate(zip(got, want, strict=True)):
            _same(a, b, f"{where}[{i}]")
    else:
        assert got == want, f"{where}: {got!r} != {want!r}"


@pytest.mark.parametrize("name", sorted(RUNS))
def test_method_trace_equals_its_golden_file(tiny, name):
    want = json.loads((GOLDEN / f"{name}.json").read_text(encoding="utf-8"))
    got = golden_run(tiny, name)
    assert got["tokens"], "a golden run that records nothing checks nothing"
    _same(got, want)
