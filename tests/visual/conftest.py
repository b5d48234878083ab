"""The golden-trace fixture of the visual tests: each test that takes ``trace`` runs on every golden trace."""

from __future__ import annotations

import pytest

from ensemble.trace import RunTrace
from tests.visual.helpers import NAMES, load


@pytest.fixture(params=NAMES)
def trace(request) -> RunTrace:
    return load(request.param)
