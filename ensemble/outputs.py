"""Output paths checked before any model loads: a run of minutes must not end in an unwritable file.

Both checks create (and remove) a probe file where the output will go, so every reason a write can fail on
opening (a missing folder, a directory in the way, a device such as ``/dev/full``, ``/proc``, no permission)
is found in milliseconds and reported in one line.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from .errors import OutputError


def _probe(folder: Path, what: str) -> None:
    try:
        fd, name = tempfile.mkstemp(prefix=".ensemble-lens-probe-", dir=folder)
        os.close(fd)
        os.unlink(name)
    except OSError as exc:
        raise OutputError(f"Cannot write {what}: {exc.strerror or exc} in {str(folder)!r}.") from exc


def check_output_file(path: str | os.PathLike) -> Path:
    """A file path that can be written: its folder exists and takes new files; the path is absent or a
    regular file (never a directory or a device)."""
    path = Path(path)
    folder = path.parent if str(path.parent) else Path(".")
    if path.is_dir():
        raise OutputError(f"Cannot write {str(path)!r}: it is a directory; give a file name such as trace.json.")
    if path.exists() and not path.is_file():
        raise OutputError(f"Cannot write {str(path)!r}: it is not a regular file (a device or a pipe).")
    if not folder.is_dir():
        raise OutputError(f"Cannot write {str(path)!r}: the folder {str(folder)!r} does not exist.")
    _probe(folder, repr(str(path)))
    return path


def check_output_folder(path: str | os.PathLike) -> Path:
    """A folder for results: it exists and takes new files, or it can be made (with its parents)."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise OutputError(f"Cannot use {str(path)!r} as the output folder: it is a file; give a folder name.")
    if not path.exists():
        ancestor = path.absolute().parent
        while not ancestor.exists():  # the folder is made with its parents: the nearest existing one decides
            ancestor = ancestor.parent
        if not ancestor.is_dir():
            raise OutputError(f"Cannot create the output folder {str(path)!r}: {str(ancestor)!r} is a file.")
        _probe(ancestor, f"the output folder {str(path)!r}")
        return path
    _probe(path, f"into the output folder {str(path)!r}")
    return path
