"""Settings are declared once: the CLI flags and the app's controls are made from the same declarations."""

import argparse

import pytest

from ensemble.errors import SettingsError
from ensemble.settings import Settings, add_arguments, from_args, specs


def test_default_flags_give_the_default_settings():
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    assert from_args(parser.parse_args([])) == Settings()


def test_every_declared_bound_is_the_validations():
    for name, spec in specs().items():
        if spec.kind not in ("int", "float") or spec.hi is None:
            continue
        Settings(**{name: spec.hi}).validate("safe", ["a"])  # the top of the range is allowed
        with pytest.raises(SettingsError, match=name):
            Settings(**{name: spec.hi + 1}).validate("safe", ["a"])


def test_the_apps_controls_offer_exactly_the_validated_range():
    from ui.controls import control_names, make_control

    for name in control_names():
        spec = specs()[name]
        control = make_control(name, spec)
        if spec.widget == "slider":
            assert control.minimum == spec.lo
            assert control.maximum == (spec.hi if spec.hi is not None else spec.widget_hi)
    assert make_control("lookahead", specs()["lookahead"]).maximum == 64
