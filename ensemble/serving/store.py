"""The traces of served requests: one JSON file each in a folder, kept within a count and a size.

``ensemble serve`` and the app's ``/v1`` routes write every response's trace here; the app opens one by its id
(``/?trace=ID`` replays it in the Run tab). The folder is ``$ENSEMBLE_LENS_TRACES`` or
``~/.cache/ensemble-lens/traces``; the oldest traces go first when a new one would pass ``max_count`` files or
``max_mb`` megabytes.
"""

from __future__ import annotations

import os
import re
import secrets
import threading
import time
from pathlib import Path

from ..errors import TraceFormatError
from ..files import write_output
from ..trace import MAX_TRACE_BYTES, RunTrace

TRACES_ENV = "ENSEMBLE_LENS_TRACES"
MAX_COUNT = 200
MAX_MB = 200.0
ID_PATTERN = re.compile(r"^[0-9]{8}-[0-9]{6}-[0-9a-f]{8}$")
"""A trace id: when it was made (UTC, to the second) and 8 random hex digits, e.g. ``20261203-231502-9f3a01bc``.
Anything else read from a URL is refused before it comes near a path."""


def default_folder() -> Path:
    return Path(os.environ.get(TRACES_ENV) or Path.home() / ".cache" / "ensemble-lens" / "traces").expanduser()


def new_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + secrets.token_hex(4)


class TraceStore:
    """A bounded folder of traces, safe to share between threads (and between ``ensemble serve`` and the app,
    which only read what the other wrote)."""

    def __init__(self, folder: str | os.PathLike | None = None, max_count: int = MAX_COUNT, max_mb: float = MAX_MB):
        self.folder = Path(folder).expanduser() if folder else default_folder()
        self.max_count, self.max_bytes = max(1, int(max_count)), max(1, int(max_mb * 1e6))
        self._lock = threading.Lock()

    def path(self, trace_id: str) -> Path | None:
        """The file of ``trace_id``, or None for an id that is not one (never a path outside the folder)."""
        return self.folder / f"{trace_id}.json" if isinstance(trace_id, str) and ID_PATTERN.match(trace_id) else None

    def save(self, trace: RunTrace, trace_id: str) -> None:
        """Write ``trace`` as ``trace_id`` (atomically), then drop the oldest files past the limits."""
        path = self.path(trace_id)
        if path is None:
            raise ValueError(f"not a trace id: {trace_id!r}")
        with self._lock:
            self.folder.mkdir(parents=True, exist_ok=True)
            write_output(str(path), trace.to_json())
            self._prune()

    def read(self, trace_id: str) -> RunTrace | None:
        """The trace of ``trace_id``; None when the id is not one, or its file is gone or unreadable."""
        path = self.path(trace_id)
        try:
            if path is None or path.stat().st_size > MAX_TRACE_BYTES:
                return None
            return RunTrace.from_json(path.read_bytes())
        except (OSError, TraceFormatError, ValueError):
            return None

    def _prune(self) -> None:
        files = []
        for entry in os.scandir(self.folder):
            if entry.is_file() and ID_PATTERN.match(entry.name.removesuffix(".json")) and entry.name.endswith(".json"):
                stat = entry.stat()
                files.append((stat.st_mtime, entry.name, stat.st_size))
        files.sort()
        total = sum(size for _, _, size in files)
        while files and (len(files) > self.max_count or total > self.max_bytes):
            _, name, size = files.pop(0)
            (self.folder / name).unlink(missing_ok=True)
            total -= size
