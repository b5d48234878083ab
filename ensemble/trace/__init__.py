"""The trace of a run and the reading of untrusted trace files: one idea, one package.

``record`` holds the trace dataclasses and their JSON round trip (its names are this package's: ``from
ensemble.trace import RunTrace`` is the library's way in); ``decisions`` each token's decision and its typed
details; ``schema``, ``values`` and ``check`` the checks on an untrusted file (its JSON's shape; sizes, value
domains and lone surrogates; limits before parsing and consistency after); ``read`` reading one in a reader
thread with a time limit; ``readable`` a run's numbers and decisions in words.
"""

from .record import *  # noqa: F403 (record's __all__ is this package's names)
from .record import __all__  # noqa: F401
