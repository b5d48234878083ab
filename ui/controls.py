"""The Run tab's engine controls, made from the declarations in :mod:`ensemble.settings`.

A setting with a ``label`` gets a control; its bounds are the validation's, so the app never offers a value
the engine refuses (lookahead goes to 64, as validated, where the slider used to stop at 16)."""

from __future__ import annotations

import gradio as gr

from ensemble.errors import SettingsError
from ensemble.settings import Settings, Spec, check_value, default_of, specs

ROW_SIZES = (4, 5, 5, 4)  # controls per row of the "Engine settings" accordion


def control_names() -> list[str]:
    """The settings the app offers a control for, in the declaration's order."""
    return [name for name, spec in specs().items() if spec.label]


def initial_value(name: str):
    """The control's starting value for the setting ``name`` (the widget's "none" value where it is None)."""
    spec = specs()[name]
    value = spec.app_default if spec.app_default is not None else default_of(name)
    return spec.none_as if value is None else value


def make_control(name: str, spec: Spec) -> gr.components.Component:
    """The widget for one setting: its kind, bounds, step, label and starting value all come from ``spec``."""
    value, common = initial_value(name), {"label": spec.label, "elem_id": spec.elem_id}
    if spec.widget == "slider":
        top = spec.hi if spec.hi is not None else spec.widget_hi
        return gr.Slider(spec.lo, top, value=value, step=spec.step, **common)
    if spec.widget == "number":
        return gr.Number(value=value, precision=0 if spec.kind == "int" else None, **common)
    if spec.widget == "radio":
        choices = ([spec.none_as] if spec.none_as is not None else []) + list(spec.choices)
        return gr.Radio(choices, value=value, **common)
    if spec.widget == "checkbox":
        return gr.Checkbox(value=bool(value), **common)
    raise ValueError(f"setting {name} declares an unknown widget {spec.widget!r}")


def engine_controls() -> dict[str, gr.components.Component]:
    """Every engine control, laid out in rows; returns them by setting name."""
    names, controls, start = control_names(), {}, 0
    for size in ROW_SIZES:
        with gr.Row():
            for name in names[start : start + size]:
                controls[name] = make_control(name, specs()[name])
        start += size
    for name in names[start:]:  # a setting added after the rows were sized still gets a control
        controls[name] = make_control(name, specs()[name])
    return controls


def settings_values(values: dict) -> dict:
    """The controls' values as settings: the widget's "none" value (``auto``, a gate of 0) becomes None and an
    emptied number box its default. Values pass unchanged otherwise: :meth:`Settings.validate` checks them."""
    out = {}
    for name, value in values.items():
        spec = specs()[name]
        if spec.none_as is not None and value == spec.none_as:
            value = None
        elif value is None or value == "":
            value = default_of(name)
        if spec.kind == "int" and isinstance(value, float) and value.is_integer():
            value = int(value)
        out[name] = value
    return out


def settings_from_controls(values: dict, **extra) -> Settings:
    """The :class:`Settings` of the controls' values (and ``extra`` ones, such as the drafter)."""
    return Settings.from_dict({**settings_values(values), **extra})


def control_values(settings: dict) -> dict:
    """The controls' values that show ``settings`` (a trace's): the inverse of :func:`settings_values`. A value
    the setting's declaration refuses (an uploaded trace is untrusted) is left out: its control keeps its value."""
    out = {}
    for name in control_names():
        if name not in settings:
            continue
        try:
            value = check_value(name, settings[name])
        except SettingsError:
            continue
        spec = specs()[name]
        out[name] = spec.none_as if value is None and spec.none_as is not None else value
    return out
