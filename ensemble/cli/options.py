"""The engine settings as command-line flags (shared by ``generate``, ``bench`` and ``evaluate``), and back.

Both directions are generated from the declarations of :class:`ensemble.settings.Settings`' fields: a new setting
is one edit there."""

from __future__ import annotations

import argparse

from .. import settings
from ..settings import Settings


def add_engine_options(p: argparse.ArgumentParser) -> None:
    """Every engine setting as a flag (shared by generate, bench and evaluate), made from ``Settings``' fields."""
    settings.add_arguments(p)


def settings_from_args(args) -> Settings:
    """The engine settings that the flags of :func:`add_engine_options` ask for."""
    return settings.from_args(args)
