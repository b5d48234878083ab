"""What to evaluate: the ``--methods`` entries (:class:`MethodSpec`) and a whole run (:class:`EvalConfig`)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

from ..capabilities import METHODS, SINGLE, is_one_model
from ..errors import EnsembleError, EvaluationError
from ..models.runtimes import split_runtime
from ..preflight import preflight
from ..settings import Settings
from .data import INSTRUCTION

ENSEMBLE_SPECS = {"unite": ("unite", None), "gac": ("gac", None), "safe-unite": ("safe", "unite"),
                  "safe-gac": ("safe", "gac"), "specem": ("specem", None)}
SPEC_HELP = "single:NAME, " + ", ".join(ENSEMBLE_SPECS) + " (an ensemble method may name its members: safe-unite@qwen=2+gemma3)"


@dataclass(frozen=True)
class MethodSpec:
    """One entry of ``--methods``: a label for the results and how to run it.

    Attributes:
        label: as written by the user ("single:qwen", "safe-gac", ...); the ``method`` column of the results.
        method: the engine's method (single | unite | gac | safe | specem).
        model: the model of a ``single:`` spec; None for ensemble methods (they use every ``--models`` entry).
        fusion: SAFE's fusion plug-in set by ``safe-unite`` / ``safe-gac``.
        members: an ensemble method's own models (``safe-unite@qwen+gemma3``), in order (SAFE's drafter is the
            first); None: every ``--models`` entry.
        weights: the members' weights (``safe-unite@qwen=2+gemma3``: qwen 2, gemma3 1); they replace
            ``--weights`` for this method.
    """

    label: str
    method: str
    model: str | None = None
    fusion: str | None = None
    members: tuple[str, ...] | None = None
    weights: tuple[tuple[str, float], ...] = ()

    def model_names(self, ensemble: list[str]) -> list[str]:
        if self.model:
            return [self.model]
        return list(self.members) if self.members else list(ensemble)

    def settings(self, base: Settings) -> Settings:
        """A fresh copy of ``base`` adjusted for this method (a single model ignores ensemble-only options)."""
        out = Settings.from_dict(base.to_dict())
        if is_one_model(self.method):
            out.drafter, out.weights, out.drafters, out.verifiers = None, {}, None, None
        if self.fusion:
            out.fusion = self.fusion
        if self.members:
            out.weights = dict(self.weights)
        return out


def _members(label: str, text: str) -> tuple[tuple[str, ...], tuple[tuple[str, float], ...]]:
    """``qwen=2+gemma3`` -> (("qwen", "gemma3"), (("qwen", 2.0),)); ``qwen@llamacpp=2`` keeps the runtime in the
    name (the pool loads that) and weighs ``qwen``."""
    names, weights = [], []
    for part in text.split("+"):
        name, eq, weight = (x.strip() for x in part.partition("="))
        if not name:
            raise EvaluationError(f"{label}: an empty model name after '@'; write e.g. safe-unite@qwen=2+gemma3.")
        names.append(name)
        if eq:
            try:  # a run names its members without "@runtime" (qwen@llamacpp=2 weighs the member qwen)
                weights.append((split_runtime(name)[0], float(weight)))
            except ValueError as exc:
                raise EvaluationError(f"{label}: the weight of {name} must be a number, not {weight!r}.") from exc
    return tuple(names), tuple(weights)


def parse_methods(text: str) -> list[MethodSpec]:
    """Parse a ``--methods`` list such as ``single:qwen,unite,safe-gac,specem``."""
    specs: list[MethodSpec] = []
    for raw in (text or "").split(","):
        item = raw.strip()
        if not item:
            continue
        if item.startswith("single:"):
            name = item.split(":", 1)[1].strip()
            if not name:
                raise EvaluationError("'single:' needs a model name, e.g. single:qwen.")
            spec = MethodSpec(f"{SINGLE}:{name}", SINGLE, model=name)
        elif item.split("@", 1)[0].strip().lower() in ENSEMBLE_SPECS:
            base, at, members = item.partition("@")
            method, fusion = ENSEMBLE_SPECS[base.strip().lower()]
            if at:
                names, weights = _members(item, members)
                spec = MethodSpec(f"{base.strip().lower()}@{members.strip()}", method, fusion=fusion, members=names, weights=weights)
            else:
                spec = MethodSpec(base.strip().lower(), method, fusion=fusion)
        else:
            shown = item if len(item) <= 40 else item[:37] + "..."
            hint = " (a single model is written single:NAME)" if item in METHODS or ":" not in item else ""
            raise EvaluationError(f"Unknown method {shown!r} in --methods{hint}. Methods: {SPEC_HELP}.")
        if spec.label in (s.label for s in specs):
            raise EvaluationError(f"--methods lists {spec.label!r} twice; list each method once.")
        specs.append(spec)
    if not specs:
        raise EvaluationError(f"--methods is empty: give a comma list of {SPEC_HELP}.")
    return specs


@dataclass
class EvalConfig:
    """What to evaluate and where the results go.

    Attributes:
        data: GSM8K-format JSONL file.
        methods: parsed ``--methods`` (see :func:`parse_methods`).
        models: the ensemble's models, in order (ensemble methods use all of them).
        out: output folder (created; reused to resume).
        settings: engine settings; ``settings.seed`` also picks the question subset.
        limit: how many questions (None = all).
        device / dtype: recorded in meta.json (models are loaded by the caller).
        command: the command line, for meta.json.
        arguments: the parsed command-line arguments, for meta.json.
    """

    data: str | os.PathLike
    methods: list[MethodSpec]
    models: list[str]
    out: str | os.PathLike
    settings: Settings = field(default_factory=Settings)
    limit: int | None = None
    device: str = "cpu"
    dtype: str = "auto"
    command: str = ""
    arguments: dict = field(default_factory=dict)

    def validate(self) -> EvalConfig:
        """Check the methods against the models and settings before anything is loaded."""
        if self.limit is not None and (isinstance(self.limit, bool) or not isinstance(self.limit, int) or self.limit < 1):
            raise EvaluationError(f"--limit must be a whole number of at least 1, not {self.limit!r}.")
        if not self.methods:
            raise EvaluationError(f"No methods to evaluate: give --methods, a comma list of {SPEC_HELP}.")
        if any(s.model is None and not s.members for s in self.methods) and not self.models:
            raise EvaluationError("Ensemble methods need --models (e.g. --models qwen,smollm2,gemma3).")
        for spec in self.methods:
            try:  # the prompts come from the questions; the command line resolves the names (saying which flag gave each)
                preflight(None, spec.method, spec.model_names(self.models), spec.settings(self.settings), resolve_names=False)
            except EnsembleError as exc:
                raise EvaluationError(f"{spec.label}: {exc}") from exc
        return self

    def model_names(self) -> list[str]:
        """Every model the methods need, each once (the ensemble's first, then single-model ones)."""
        names = [] if all(s.model or s.members for s in self.methods) else list(self.models)
        for spec in self.methods:
            for name in spec.model_names(self.models):
                if name not in names:
                    names.append(name)
        return names

    def fingerprint(self, data_sha256: str) -> dict:
        """What must not change between runs writing into one folder (else results would not be comparable)."""
        return json.loads(json.dumps({
            "data_sha256": data_sha256,
            "models": list(self.models),
            "settings": self.settings.to_dict(),
            "instruction": INSTRUCTION,
        }))
