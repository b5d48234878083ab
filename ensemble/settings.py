"""Engine settings shared by every method, with validation that explains what is wrong."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields

from .errors import SettingsError, name_list

METHODS = ("single", "unite", "gac", "safe", "specem")
FUSIONS = ("unite", "gac")
SHARPENING = ("none", "heuristic", "geometric")
SCORINGS = ("logprob", "logit")
MAX_NEW_TOKENS = 4096
SAMPLED_DRAFTS = (0.6, 0.9)
"""SpecEM's released code drafts with temperature 0.6 and top-p 0.9 (``sample_drafts``)."""
GAC_GATE = 0.5
"""GaC's gate: the SAFE paper's setting ("GaC performs ensembling only when the main LLM's next-token
probability falls below 0.5", §4.1)."""


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
        sharpen: none | heuristic | geometric; default heuristic for SAFE, none for every-token fusion.
        sharpen_lambda: the heuristic's threshold λ.
        gac_gate: GaC's gate (SAFE paper §4.1, kept inside GaC+SAFE in its Table 2): wherever GaC fuses (the
            ``gac`` method, and SAFE with ``fusion="gac"``), fuse only when the main model's top next-token
            probability is below this; otherwise take the main model's token (traced as ``gated``). The main
            model is the drafter (the first model unless ``drafter`` is set). Default 0.5; None turns it off.
        drafter: SAFE's drafter (default: the first model).
        lookahead: SAFE's draft length n.
        fusion: SAFE's fusion plug-in (unite | gac).
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
    """

    max_new_tokens: int = 128
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int = 0
    top_k: int = 10
    weights: dict[str, float] = field(default_factory=dict)
    sharpen: str | None = None
    sharpen_lambda: float = 0.1
    gac_gate: float | None = GAC_GATE
    drafter: str | None = None
    lookahead: int = 5
    fusion: str = "unite"
    segment_len: int = 10
    eta: float = 4.0
    scoring: str = "logprob"
    sample_drafts: bool = False
    drafters: list[str] | None = None
    verifiers: list[str] | None = None
    stop_strings: list[str] | None = None
    max_prompt_tokens: int = 2048

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

    def sharpen_for(self, method: str) -> str:
        if self.sharpen:
            return self.sharpen
        return "heuristic" if method == "safe" else "none"

    def validate(self, method: str, models: list[str], vocab_sizes: dict[str, int] | None = None) -> Settings:
        """Check every setting for ``method`` on ``models``; raise :class:`SettingsError` with a clear message."""
        if method not in METHODS:
            raise SettingsError(f"Unknown method {str(method)[:40]!r}. Methods: {', '.join(METHODS)}.")
        if not models:
            raise SettingsError("No models selected: choose at least one model.")
        if len(set(models)) != len(models):
            raise SettingsError(f"A model is listed twice in {', '.join(models)}; list each model once.")
        self.max_new_tokens = _int("max_new_tokens", self.max_new_tokens, 1, MAX_NEW_TOKENS)
        self.temperature = _float("temperature", self.temperature, 0.0, 10.0)
        self.top_p = _float("top_p", self.top_p, 0.0, 1.0)
        if self.top_p <= 0:
            raise SettingsError("top_p must be above 0 (1 keeps the whole distribution).")
        self.seed = _int("seed", self.seed, 0, 2**63 - 1)
        if vocab_sizes:  # before the models load their vocabularies are unknown: only the lower bound is checked
            smallest = min(vocab_sizes, key=vocab_sizes.__getitem__)
            size = vocab_sizes[smallest]
            self.top_k = _int("top_k", self.top_k, 1, size, why=f"the smallest vocabulary, {smallest}'s, has {size:,} tokens")
        else:
            self.top_k = _int("top_k", self.top_k, 1, None)
        self.sharpen_lambda = _float("sharpen_lambda", self.sharpen_lambda, 0.0, 1.0)
        if self.sharpen is not None and self.sharpen not in SHARPENING:
            raise SettingsError(f"Unknown sharpening {str(self.sharpen)[:40]!r}. Choose one of: {', '.join(SHARPENING)}.")
        if self.fusion not in FUSIONS:
            raise SettingsError(f"Unknown fusion {str(self.fusion)[:40]!r}. Choose one of: {', '.join(FUSIONS)}.")
        if self.gac_gate is not None:
            self.gac_gate = _float("gac_gate", self.gac_gate, 0.0, 1.0)
            if self.gac_gate <= 0:
                raise SettingsError("gac_gate must be above 0 and at most 1 (the paper uses 0.5); use none to turn the gate off.")
        if not isinstance(self.weights, dict):
            raise SettingsError("weights must map model names to positive numbers, e.g. {\"qwen\": 2, \"gemma3\": 1}.")
        for name, weight in self.weights.items():
            if name not in models:
                raise SettingsError(f"weights names {str(name)[:40]!r}, which is not one of the selected models ({', '.join(models)}).")
            self.weights[name] = _float(f"weight of {name}", weight, 0.0, 1e9)
        if self.weights and sum(self.weights.get(n, 1.0) for n in models) <= 0:
            raise SettingsError("The model weights sum to 0: give at least one model a weight above 0.")
        self.lookahead = _int("lookahead", self.lookahead, 1, 64)
        self.segment_len = _int("segment_len", self.segment_len, 1, 256)
        self.eta = _float("eta", self.eta, 0.0, 100.0)
        if not isinstance(self.sample_drafts, bool):
            raise SettingsError(f"sample_drafts must be true or false, not {str(self.sample_drafts)[:40]!r}.")
        if self.scoring not in SCORINGS:
            raise SettingsError(f"Unknown scoring {str(self.scoring)[:40]!r}. Choose one of: {', '.join(SCORINGS)}.")
        self.max_prompt_tokens = _int("max_prompt_tokens", self.max_prompt_tokens, 16, 1_000_000)
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
        if self.stop_strings is not None and (
            not isinstance(self.stop_strings, list) or not all(isinstance(s, str) and s for s in self.stop_strings)
        ):
            raise SettingsError("stop_strings must be a list of non-empty strings.")
        return self


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


def _float(name: str, value, lo: float, hi: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise SettingsError(f"{name} must be a number, not {str(value)[:40]!r}.")
    value = float(value)
    if not math.isfinite(value):
        raise SettingsError(f"{name} must be a finite number, not {value}.")
    if not lo <= value <= hi:
        raise SettingsError(f"{name} must be between {lo:g} and {hi:g}; got {value:g}.")
    return value
