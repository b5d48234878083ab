"""Data files the app reads at run time, in a checkout and in an installed wheel alike.

In a checkout they lie where the repository keeps them (``assets/first-view.json``, the committed results under
``docs/results``); the wheel carries copies inside this package (``ui/_shipped/<same path>``, put there by
``setup.py`` when the wheel is built), since a wheel holds packages, not the repository's folders.
"""

from __future__ import annotations

from pathlib import Path

SHIPPED = (
    "assets/first-view.json",
    "docs/results/gsm8k-summary.csv",
    "docs/results/gsm8k-60-traced/",  # the project's GSM8K run with its traces, opened by the Results tab's button
)
"""The repository's files the app reads (``setup.py`` copies these into the wheel); a path ending in ``/`` is a
folder, copied whole."""

_HERE = Path(__file__).resolve().parent


def project_file(relative: str) -> Path:
    """The file at ``relative`` (a path of :data:`SHIPPED`): the wheel's copy when installed, else the checkout's."""
    packed = _HERE / "_shipped" / relative
    return packed if packed.exists() else _HERE.parent / relative
