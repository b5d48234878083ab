"""The engine's file helpers: a full sha256 and an exclusive lock (the model cache, the evaluation store), and
output paths checked before any model loads, then written atomically (the command line, the evaluation report).

A run of minutes must not end in an unwritable file. Both output checks create (and remove) a probe file where
the output will go, so every reason a write can fail on opening (a missing folder, a directory in the way, a
device such as ``/dev/full``, ``/proc``, no permission) is found in milliseconds and reported in one line. What
is written later goes through :func:`atomic_output`: a temporary file beside the target, renamed over it once
complete, so a failure never leaves a partial file.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import tempfile
from pathlib import Path

from .errors import OutputError


def file_sha256(path: str | os.PathLike) -> str:
    """sha256 of a whole file, read in 4 MB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


@contextlib.contextmanager
def file_lock(path: Path, wait: bool = True):
    """Hold an exclusive ``flock`` on ``path`` (created with its folder). With ``wait=False`` a lock someone
    else holds raises ``BlockingIOError`` at once instead of waiting."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


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


def check_distinct_outputs(**paths: str | os.PathLike | None) -> None:
    """Refuse two outputs that name one file (``--out run.json --html ./run.json``, a symlink, a hard link): the
    second would silently overwrite the first. ``paths`` maps each flag (``out``, ``html``) to its value."""
    seen: dict[str, str] = {}
    for flag, path in paths.items():
        if not path:
            continue
        real = os.path.realpath(path)
        for other, other_real in seen.items():
            same = real == other_real
            if not same and os.path.exists(real) and os.path.exists(other_real):
                same = os.path.samefile(real, other_real)
            if same:
                raise OutputError(
                    f"--{other} and --{flag} name the same file {str(path)!r}: give each output its own file name."
                )
        seen[flag] = real


@contextlib.contextmanager
def atomic_output(path: str | os.PathLike, mode: str = "w", **open_args):
    """Open ``path`` for writing so that it is replaced whole or not at all: the text goes to a temporary file
    beside it, which is synced and renamed over ``path`` when the block ends without error. On any failure (a
    full disk, a folder that became read-only) the temporary file is removed, ``path`` is left as it was, and
    an :class:`OutputError` names the file."""
    path = Path(path)
    folder = path.parent if str(path.parent) else Path(".")
    if "b" not in mode:
        open_args.setdefault("encoding", "utf-8")
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".part", dir=folder)
        os.fchmod(fd, 0o666 & ~_umask())  # as open() would create it (mkstemp's files are private)
        with os.fdopen(fd, mode, **open_args) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        tmp = None
    except OSError as exc:
        raise OutputError(
            f"Could not save {str(path)!r}: {exc.strerror or exc}; nothing was written there (free some space or "
            f"choose another folder)."
        ) from exc
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


def write_output(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically (:func:`atomic_output`)."""
    with atomic_output(path) as fh:
        fh.write(text)


def _umask() -> int:
    """The process's umask, read without changing it (``os.umask`` sets it, a race with other threads)."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return 0o022
