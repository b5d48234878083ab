"""Small file helpers shared by the model cache and the evaluation store: a full sha256 and an exclusive lock."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
from pathlib import Path


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
