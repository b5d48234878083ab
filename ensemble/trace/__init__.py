"""The trace of a run and the reading of untrusted trace files: one idea, one package.

``record`` holds the trace dataclasses and their JSON round trip (its names are this package's: ``from
ensemble.trace import RunTrace`` is the library's way in); ``decisions`` each token's decision and its typed
details; ``schema``, ``values`` and ``check`` the checks on an untrusted file (its JSON's shape; sizes, value
domains and lone surrogates; limits before parsing and consistency after); ``read`` reading one in a reader
thread with a time limit; ``readable`` a run's numbers and decisions in words.

The names load on first use, so importing ``ensemble.trace.values`` (the settings read its limits) does not load
the records, whose checks read the settings.
"""

from importlib import import_module


def __getattr__(name: str):
    record = import_module(f"{__name__}.record")
    if name in getattr(record, "__all__", ()):
        return getattr(record, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
