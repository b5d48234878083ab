"""Command line: ``python -m ensemble {models,prepare,tokenize,generate,bench,evaluate,report}``.

:mod:`.parser` builds the parser from one module per command; :mod:`.options` turns the engine settings into
flags and back. This layer may draw with ``visual`` (``report.html``); the engine below it never does.
"""

from .parser import build_parser, main

__all__ = ["build_parser", "main"]
