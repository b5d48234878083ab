"""Ensemble Lens engine: run several language models as one ensemble and trace every decision.

Methods: single-model decoding, every-token fusion (UniTE, GaC), SAFE selective ensembling and SpecEM
segment ensembling. The engine has no UI imports; ``visual/`` renders its traces and ``app.py`` wires both.

Heavy modules (torch, transformers) load on first use, so ``from ensemble.trace import RunTrace`` stays light.
"""

from importlib import import_module

__all__ = ["EnsembleRun", "ModelPool", "RunTrace", "Settings", "generate", "load", "resolve"]

_LAZY = {
    "EnsembleRun": "ensemble.methods",
    "generate": "ensemble.methods",
    "ModelPool": "ensemble.models",
    "load": "ensemble.models",
    "resolve": "ensemble.models",
    "RunTrace": "ensemble.trace",
    "Settings": "ensemble.settings",
}


def __getattr__(name):
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(name)
