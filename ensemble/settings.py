"""Engine settings shared by every method, declared once: each field carries its help, bounds, choices and
widget, and the validation, the CLI flags (:func:`add_arguments`, :func:`from_args`) and the app's controls
are all made from that one declaration. A new setting is one field here."""

from __future__ import annotations

import argparse
import math
from dataclasses import MISSING, asdict, dataclass, field, fields

from .capabilities import CAPABILITIES, METHODS
from .errors import SettingsError, name_list
from .trace.values import MAX_PAIRS

FUSIONS = ("unite", "gac")
SHARPENING = ("none", "heuristic", "geometric")
SCORINGS = ("logprob", "logit")
SHARPEN_SCOPES = ("guarded", "vocabulary")
"""Which keys heuristic sharpening lets absorb (:mod:`ensemble.methods.fusion`): the released code's guards, or any key of
the drafter's vocabulary."""
UNITE_MISSING = ("once", "prefix")
"""What UniTE gives a union key a model has no token for (:mod:`ensemble.methods.fusion`): the first token of the
model's encoding of it unless that token already stands for another key (one probability counted once), or that
token's score whatever it stands for (the SAFE authors' released code)."""
AFTER_KEPT = ("walk-on", "end-round")
"""What SAFE does after an ensembled token that keeps the draft: walk on through the draft, or end the round and
draft again (Alg. 1, line 10)."""
MAX_NEW_TOKENS = 4096
SAMPLED_DRAFTS = (0.6, 0.9)
"""SpecEM's released code drafts with temperature 0.6 and top-p 0.9 (``sample_drafts``)."""
GAC_GATE = 0.5
"""GaC's gate: the SAFE paper's setting ("GaC performs ensembling only when the main LLM's next-token
probability falls below 0.5", §4.1)."""


@dataclass(frozen=True)
class Spec:
    """How one setting is checked, offered on the command line and shown in the app.

    Attributes:
        help: the flag's help (``%(default)s`` is argparse's); empty for none.
        lo / hi: inclusive bounds of a number (``hi`` None: no fixed upper bound).
        choices: the allowed strings.
        kind: ``int``, ``float``, ``choice``, ``flag`` (a bool), ``weights``, ``gate`` (a probability or
            none), ``models`` (a comma list of model names), ``strings`` (a repeatable flag) or ``model``.
        flag: the CLI flag (default: ``--`` and the name with dashes); None: no flag.
        metavar: the flag's metavar.
        label: the app's label; None: the app has no engine control for it.
        widget: ``slider``, ``number``, ``radio`` or ``checkbox``.
        step: the slider's step.
        widget_hi: the slider's end where the setting has no fixed upper bound.
        app_default: the app's starting value where it differs from the engine's default (None: the same).
        none_as: the widget value that stands for None (``"auto"`` for sharpening, ``0`` for the gate).
        elem_id: the control's DOM id (the browser tests find it by that).
        dest: the attribute argparse stores the flag in (default: the setting's name).
    """

    help: str = ""
    lo: float | None = None
    hi: float | None = None
    choices: tuple[str, ...] = ()
    kind: str = ""
    flag: str | None = ""
    metavar: str | None = None
    label: str | None = None
    widget: str = ""
    step: float = 1
    widget_hi: float | None = None
    app_default: object = None
    none_as: object = None
    elem_id: str | None = None
    dest: str | None = None


def setting(default=MISSING, *, factory=MISSING, **spec):
    """A dataclass field whose metadata holds its :class:`Spec`."""
    if factory is not MISSING:
        return field(default_factory=factory, metadata={"spec": Spec(**spec)})
    return field(default=default, metadata={"spec": Spec(**spec)})


@dataclass
class Settings:
    """Every option of the engine. Unset method-specific options take the method's default.

    Attributes:
        max_new_tokens: token budget of the response.
        temperature: 0 = greedy (default); above 0 samples (SAFE uses its paper's acceptance rule).
        top_p: nucleus sampling for sampled drafting.
        seed: random seed for sampling.
        top_k: UniTE's k (size of each model's candidate list) and the length of recorded top-k lists.
        weights: model weights for fusion and for SAFE's consensus mean (a model not named weighs 1; 0 or more, not all 0).
        drafter_weight: SAFE: the drafter's weight where ``weights`` does not name it (the verifiers weigh 1 unless
            named). Default 2, chosen by measurement (docs/results.md, "Which ensemble and weights"): on 12 GSM8K
            questions a drafter weight of 2 cut SAFE's replacements by 29-67% and its phrase loops from 3-4 of 12
            answers to 0-1 in every ensemble measured, and it names no model, so it holds whichever drafter is chosen.
        sharpen: none | heuristic | geometric; default heuristic for SAFE, none for every-token fusion.
        sharpen_lambda: the heuristic's threshold λ.
        sharpen_scope: which keys the heuristic lets absorb the keys that start with them. ``guarded`` (default):
            the SAFE authors' released code, only keys among the drafter's 10 most probable, and a whitespace-only
            key absorbs only whitespace-only keys; ``vocabulary``: any key of the drafter's vocabulary (§3.3's
            "the drafter's tokens" read literally; this project's reading before issue 30). The default follows
            the released code and the side-by-side run of issue 30, where the literal reading wrote a bare space
            in place of a drafted word; the 60-question measurement that would confirm it is not finished yet
            (docs/results.md, "Sharpening guards and round ends").
        gac_gate: GaC's gate (SAFE paper §4.1, kept inside GaC+SAFE in its Table 2): wherever GaC fuses (the
            ``gac`` method, and SAFE with ``fusion="gac"``), fuse only when the main model's top next-token
            probability is below this; otherwise take the main model's token (traced as ``gated``). The main
            model is the drafter (the first model unless ``drafter`` is set). Default 0.5; None turns it off.
        drafter: SAFE's drafter (default: the first model).
        lookahead: SAFE's draft length n.
        fusion: SAFE's fusion plug-in (unite | gac).
        unite_missing: UniTE (the method, and SAFE with ``fusion="unite"``), a union key a model has no token for
            (smollm2 has "." and "\\n" but no ".\\n"). ``once`` (default): the logit of the first token of the
            model's own encoding of the key, unless that token already stands for another key of the union, which
            then gives the key nothing (UniTE's rule as docs/algorithms.md reads it: one token's probability is
            counted once). ``prefix``: that first token's logit whatever it stands for, so smollm2's "." is counted
            for ".", ".\\n" and ".\\n\\n" (the SAFE authors' released code; for comparing with it).
        after_kept: SAFE, after a fused token that keeps the draft: ``walk-on`` through the rest of the draft
            (default) or ``end-round`` and draft again from there (Alg. 1 line 10, i <- j+1). walk-on stays the
            default: on two GSM8K questions end-round wrote the same text and discarded 2-4x the drafted tokens
            (docs/results.md, "Sharpening guards and round ends"; the 60-question measurement is not finished).
        segment_len: SpecEM's segment length L in tokens.
        eta: SpecEM's Hedge step size eta0 (0 turns the online feedback off). Default 4, chosen by measurement
            (docs/results.md, "SpecEM feedback"): on GSM8K answers of 128 tokens the step eta0·sqrt(1/K)/t adds
            up to about 1.9·eta0 over 14 rounds, so at 0.5 the winning model's weight ends at 0.35 of 0.33
            (flat on a chart) and at 4 at 0.45-0.51.
        scoring: SpecEM's verifier scoring (logprob | logit).
        sample_drafts: SpecEM drafts by sampling at temperature 0.6, top-p 0.9 (the released code's drafting,
            seeded by ``seed``) instead of greedily; verification and the vote stay as they are.
        drafters / verifiers: SpecEM's subsets of the models (default: all).
        stop_strings: strings that end the response (default: the templates' own, e.g. "\\nQuestion:").
        max_prompt_tokens: longer prompts are trimmed from the start, with a warning.

    Each field's metadata (:class:`Spec`) is the one declaration of its flag, bounds and control.
    """

    max_new_tokens: int = setting(128, kind="int", lo=1, hi=MAX_NEW_TOKENS, label="Max new tokens", widget="slider",
                                  app_default=96, elem_id="max-tokens")
    temperature: float = setting(0.0, kind="float", lo=0.0, hi=10.0, help="0 = greedy (default)",
                                 label="Temperature (0 = greedy)", widget="slider", step=0.05)
    top_p: float = setting(1.0, kind="float", lo=0.0, hi=1.0, label="Top-p", widget="slider", step=0.05)
    seed: int = setting(0, kind="int", lo=0, hi=2**63 - 1, help="random seed (sampling; evaluate: which questions)",
                        label="Seed", widget="number")
    top_k: int = setting(10, kind="int", lo=1, hi=MAX_PAIRS, help=f"UniTE's k (default 10; a trace keeps at most {MAX_PAIRS:,})", label="UniTE top-k",
                         widget="slider", widget_hi=50)
    weights: dict[str, float] = setting(factory=dict, kind="weights",
                                        help="model weights, e.g. qwen=2,gemma3=1 (default equal)")
    drafter_weight: float = setting(2.0, kind="float", lo=0.1, hi=None, help="SAFE: the drafter's weight unless --weights "
                                    "names it (default %(default)s, measured; 1 = equal)", label="SAFE drafter weight",
                                    widget="slider", step=0.25, widget_hi=4.0, elem_id="drafter-weight")
    sharpen: str | None = setting(None, kind="choice", choices=SHARPENING, help="default: heuristic for safe, none for unite/gac",
                                  label="Sharpening", widget="radio", none_as="auto")
    sharpen_lambda: float = setting(0.1, kind="float", lo=0.0, hi=1.0, flag="--lambda", help="heuristic sharpening threshold",
                                    label="Sharpening threshold (heuristic λ)", widget="slider", step=0.01)
    sharpen_scope: str = setting("guarded", kind="choice", choices=SHARPEN_SCOPES,
                                 help="which keys heuristic sharpening lets absorb: guarded (the drafter's top 10, "
                                 "a whitespace-only key only whitespace; default, the released code's) | vocabulary",
                                 label="Sharpening scope", widget="radio")
    gac_gate: float | None = setting(
        GAC_GATE, kind="gate", lo=0.0, hi=1.0, metavar="P|none",
        help="GaC (and SAFE with --fusion gac): fuse only when the main model's top probability is below P"
        " (default %(default)s, the paper's; none = fuse every time)",
        label="No vote when the main model is this sure (GaC gate; paper: 0.5; 0 = off)", widget="slider", step=0.05,
        none_as=0)
    drafter: str | None = setting(None, kind="model", help="SAFE drafter (default: the first model)")
    lookahead: int = setting(5, kind="int", lo=1, hi=64, help="SAFE draft length n (default 5)", label="SAFE draft length (lookahead n)",
                             widget="slider")
    fusion: str = setting("unite", kind="choice", choices=FUSIONS, help="SAFE fusion: unite | gac", label="SAFE fusion",
                          widget="radio")
    unite_missing: str = setting("once", kind="choice", choices=UNITE_MISSING,
                                 help="UniTE, a key a model has no token for: once (default: the first token of its "
                                 "encoding unless that token stands for another key) | prefix (that token even so: "
                                 "the released code's)", label="UniTE missing key", widget="radio")
    after_kept: str = setting("walk-on", kind="choice", choices=AFTER_KEPT,
                              help="SAFE after a fused token that keeps the draft: walk-on (default) | end-round (Alg. 1)",
                              label="SAFE after a kept fusion", widget="radio")
    segment_len: int = setting(10, kind="int", lo=1, hi=256, help="SpecEM segment length (default 10)",
                               label="SpecEM segment length", widget="slider")
    eta: float = setting(4.0, kind="float", lo=0.0, hi=100.0, help="SpecEM Hedge step eta0 (default %(default)s; 0 = no feedback)",
                         label="SpecEM: how fast weights follow the votes (η; 0 = off)", widget="slider", step=0.05)
    scoring: str = setting("logprob", kind="choice", choices=SCORINGS, help="SpecEM scoring: logprob | logit",
                           label="SpecEM scoring", widget="radio")
    sample_drafts: bool = setting(False, kind="flag", label="SpecEM: sample drafts (T 0.6, top-p 0.9)", widget="checkbox",
                                  help="SpecEM: sample drafts at temperature 0.6, top-p 0.9 like the released code (default greedy)")
    drafters: list[str] | None = setting(None, kind="models", help="SpecEM drafting models (default: all)")
    verifiers: list[str] | None = setting(None, kind="models", help="SpecEM verifying models (default: all)")
    stop_strings: list[str] | None = setting(None, kind="strings", flag="--stop", dest="stop", help="stop string (repeatable)")
    max_prompt_tokens: int = setting(2048, kind="int", lo=16, hi=1_000_000)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict | None) -> Settings:
        """Build settings from a JSON-like dict (API, trace files); unknown names are an error."""
        data = dict(data or {})
        known = {f.name for f in fields(cls)}
        unknown = sorted(map(str, set(data) - known))
        if unknown:
            raise SettingsError(f"Unknown setting(s): {name_list(unknown)}. Known settings: {', '.join(sorted(known))}.")
        out = cls()
        for name, value in data.items():
            setattr(out, name, value)
        return out

    def safe_weights(self, drafter: str) -> dict[str, float]:
        """SAFE's fusion and consensus weights (unnormalised; a model not named weighs 1): ``weights`` as given,
        and the drafter at ``drafter_weight`` unless ``weights`` names it. The paper weighs its members equally
        (models "with similar capability", §4.3); ours are unequal, and a drafter weight of 2 measured better in
        every ensemble tried (the field's docstring)."""
        return {drafter: self.drafter_weight, **self.weights}

    def sharpen_for(self, method: str) -> str:
        if self.sharpen:
            return self.sharpen
        found = CAPABILITIES.get(method)
        return found.default_sharpen if found else "none"

    def validate(self, method: str, models: list[str], vocab_sizes: dict[str, int] | None = None) -> Settings:
        """Check every setting for ``method`` on ``models``; raise :class:`SettingsError` with a clear message."""
        if method not in METHODS:
            raise SettingsError(f"Unknown method {str(method)[:40]!r}. Methods: {', '.join(METHODS)}.")
        if not models:
            raise SettingsError("No models selected: choose at least one model.")
        if len(set(models)) != len(models):
            raise SettingsError(f"A model is listed twice in {', '.join(models)}; list each model once.")
        if vocab_sizes:  # before the models load their vocabularies are unknown: only the lower bound is checked
            smallest = min(vocab_sizes, key=vocab_sizes.__getitem__)
            size = vocab_sizes[smallest]
            self.top_k = _int("top_k", self.top_k, 1, size, why=f"the smallest vocabulary, {smallest}'s, has {size:,} tokens")
        for f in fields(self):  # 1. each value on its own: type, bounds and choices from its declaration
            setattr(self, f.name, _checked(f.name, getattr(self, f.name), spec_of(f.name)))
        # 2. what one declaration cannot say: exclusive bounds and the names of the selected models
        if self.top_p <= 0:
            raise SettingsError("top_p must be above 0 (1 keeps the whole distribution).")
        if self.gac_gate is not None and self.gac_gate <= 0:
            raise SettingsError("gac_gate must be above 0 and at most 1 (the paper uses 0.5); use none to turn the gate off.")
        for name, weight in self.weights.items():
            if name not in models:
                raise SettingsError(f"weights names {str(name)[:40]!r}, which is not one of the selected models ({', '.join(models)}).")
            self.weights[name] = _float(f"weight of {name}", weight, 0.0, 1e9)
        if self.weights and sum(self.weights.get(n, 1.0) for n in models) <= 0:
            raise SettingsError("The model weights sum to 0: give at least one model a weight above 0.")
        if self.drafter is not None and self.drafter not in models:
            raise SettingsError(f"The drafter {str(self.drafter)[:40]!r} is not one of the selected models ({', '.join(models)}).")
        for label in ("drafters", "verifiers"):
            subset = getattr(self, label)
            if subset is None:
                continue
            if not isinstance(subset, list) or not subset:
                raise SettingsError(f"The {label} set is empty: name at least one of {', '.join(models)}.")
            for name in subset:
                if name not in models:
                    raise SettingsError(f"{label[:-1].capitalize()} {str(name)[:40]!r} is not loaded: it must be one of {', '.join(models)}.")
        return self


def spec_of(name: str) -> Spec:
    """The declaration of the setting ``name``."""
    return _SPECS[name]


def specs() -> dict[str, Spec]:
    """Every setting's declaration, in the dataclass's order."""
    return dict(_SPECS)


def default_of(name: str):
    f = _FIELDS[name]
    return f.default_factory() if f.default_factory is not MISSING else f.default


def check_value(name: str, value):
    """The setting ``name``'s ``value`` checked against its declaration alone (type, bounds, choices)."""
    return _checked(name, value, spec_of(name))


def _checked(name: str, value, spec: Spec):
    """``value`` checked against its declaration (None, where allowed, passes unchanged)."""
    kind = spec.kind
    if kind == "int":
        return _int(name, value, spec.lo, spec.hi)
    if kind == "float" or (kind == "gate" and value is not None):
        return _float(name, value, spec.lo, spec.hi)
    if kind == "choice" and value is not None and value not in spec.choices:
        what = {"sharpen": "sharpening"}.get(name, name)
        raise SettingsError(f"Unknown {what} {str(value)[:40]!r}. Choose one of: {', '.join(spec.choices)}.")
    if kind == "flag" and not isinstance(value, bool):
        raise SettingsError(f"{name} must be true or false, not {str(value)[:40]!r}.")
    if kind == "weights" and not isinstance(value, dict):
        raise SettingsError("weights must map model names to positive numbers, e.g. {\"qwen\": 2, \"gemma3\": 1}.")
    if kind == "strings" and value is not None and (not isinstance(value, list) or not all(isinstance(s, str) and s for s in value)):
        raise SettingsError(f"{name} must be a list of non-empty strings.")
    return value


# -- the command line: every setting as a flag (generate, bench and evaluate) ---------------------------------
def flag_of(name: str) -> str | None:
    spec = spec_of(name)
    return None if spec.flag is None else spec.flag or "--" + name.replace("_", "-")


def add_arguments(parser: argparse.ArgumentParser, only: tuple[str, ...] | None = None, **overrides: dict) -> None:
    """Add the settings' flags to ``parser`` (every one, or those in ``only``) in an "engine settings" group.

    ``overrides`` maps a setting's name to argparse keywords that replace its own (bench's other defaults)."""
    group = parser.add_argument_group("engine settings") if only is None else parser
    for name, spec in _SPECS.items():
        if (only is not None and name not in only) or flag_of(name) is None:
            continue
        kwargs = {"dest": spec.dest or name, "default": default_of(name) if spec.kind in ("int", "float", "gate", "choice") else None}
        if spec.help:
            kwargs["help"] = spec.help
        if spec.metavar:
            kwargs["metavar"] = spec.metavar
        if spec.kind in ("int", "float"):
            kwargs["type"] = int if spec.kind == "int" else float
        elif spec.kind == "gate":
            kwargs["type"] = _gate_arg
        elif spec.kind == "choice" and name == "sharpen":
            kwargs["choices"] = list(spec.choices)
        elif spec.kind == "flag":
            kwargs = {**kwargs, "action": "store_true", "default": False}
        elif spec.kind == "strings":
            kwargs["action"] = "append"
        kwargs.update(overrides.get(name, {}))
        group.add_argument(flag_of(name), **kwargs)


def from_args(args: argparse.Namespace) -> Settings:
    """The :class:`Settings` of parsed flags (those :func:`add_arguments` added; others keep their defaults)."""
    out = Settings()
    for name, spec in _SPECS.items():
        if not hasattr(args, spec.dest or name):
            continue
        value = getattr(args, spec.dest or name)
        if spec.kind == "weights":
            value = _weights_arg(value)
        elif spec.kind == "models" and value is not None:
            value = _models_arg(value, flag_of(name)) if value or name == "verifiers" else None
        setattr(out, name, value)
    return out


def _models_arg(value: str, flag: str) -> list[str]:
    names = [n.strip() for n in (value or "").split(",") if n.strip()]
    if not names:
        raise SettingsError(f"{flag} needs at least one model name, e.g. {flag} qwen,smollm2,gemma3")
    return names


def _weights_arg(value: str | None) -> dict[str, float]:
    if not value:
        return {}
    out = {}
    for part in value.split(","):
        name, _, weight = part.partition("=")
        try:
            out[name.strip()] = float(weight)
        except ValueError as exc:
            raise SettingsError(f"--weights wants name=number pairs like qwen=2,gemma3=1; got {part!r}.") from exc
    return out


def _gate_arg(value: str) -> float | None:
    if value.strip().lower() in ("none", "off"):
        return None
    try:
        return float(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"a probability in (0, 1] or none, not {value!r}") from exc


_FIELDS = {f.name: f for f in fields(Settings)}
_SPECS = {name: f.metadata["spec"] for name, f in _FIELDS.items()}


def _int(name: str, value, lo: int, hi: int | None, why: str = "") -> int:
    """A whole number in [lo, hi] (no upper bound when ``hi`` is None); the message states the real bounds."""
    if isinstance(value, bool) or not isinstance(value, int | float) or (isinstance(value, float) and not value.is_integer()):
        raise SettingsError(f"{name} must be a whole number, not {str(value)[:40]!r}.")
    value = int(value)
    if hi is None:
        if value < lo:
            raise SettingsError(f"{name} must be at least {lo}; got {_shown(value)}.")
        return value
    if not lo <= value <= hi:
        extra = f" ({why})" if why else ""
        raise SettingsError(f"{name} must be between {lo} and {hi}{extra}; got {_shown(value)}.")
    return value


def _shown(value: int) -> str:
    return str(value) if abs(value) < 10**18 else f"a number of {len(str(abs(value))) if abs(value) < 10**4000 else 'over 4,000'} digits"


def _float(name: str, value, lo: float, hi: float | None) -> float:
    """A finite number in [lo, hi] (no upper bound when ``hi`` is None)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise SettingsError(f"{name} must be a number, not {str(value)[:40]!r}.")
    value = float(value)
    if not math.isfinite(value):
        raise SettingsError(f"{name} must be a finite number, not {value}.")
    if hi is None:
        if value < lo:
            raise SettingsError(f"{name} must be at least {lo:g}; got {value:g}.")
        return value
    if not lo <= value <= hi:
        raise SettingsError(f"{name} must be between {lo:g} and {hi:g}; got {value:g}.")
    return value
