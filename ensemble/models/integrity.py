"""The cache's integrity checks: a manifest of each file's size, sampled digest and CRC-32, and a record of
when each file last passed the full check."""

from __future__ import annotations

import contextlib
import hashlib
import json
import zlib
from pathlib import Path

from ..files import file_sha256

CACHE_FORMAT = 3
_SAMPLE_BLOCKS = 32
_BLOCK = 64 * 1024


def sample_digest(path: Path) -> str:
    """A fast fingerprint of a large file: its size and sha256 over 32 blocks spread through it.

    Full sha256 of a 2.5 GB file costs seconds on every load; the sampled digest catches truncation and
    overwritten regions in milliseconds. ``python -m ensemble models --verify`` runs the full check.
    """
    size = path.stat().st_size
    digest = hashlib.sha256(str(size).encode())
    with path.open("rb") as fh:
        for i in range(_SAMPLE_BLOCKS):
            fh.seek(max(0, (size - _BLOCK) * i // max(1, _SAMPLE_BLOCKS - 1)))
            digest.update(fh.read(_BLOCK))
    return digest.hexdigest()


def file_crc32(path: Path) -> str:
    """CRC-32 of a whole file (about 2 GB/s: fast enough to check every cached file after each load)."""
    crc = 0
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 24), b""):
            crc = zlib.crc32(block, crc)
    return f"{crc:08x}"


NOT_PREPARED = "is not prepared yet"
"""What :func:`verify_manifest` says of a folder never prepared (not damaged: nothing to check)."""

VERIFIED = "verified.json"
"""Beside the manifest: each file's (size, mtime, ctime, inode) when it last passed the full check."""


def _stat_stamp(path: Path) -> list[int]:
    """What any write to a file changes: its size, mtime and ctime (which no tool can set back) or its inode."""
    st = path.stat()
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]


def changed_files(folder: Path, files) -> list[str]:
    """Files of the manifest whose stat differs from the one recorded at their last full check."""
    try:
        verified = json.loads((folder / VERIFIED).read_text())
    except (OSError, ValueError):
        verified = {}
    if not isinstance(verified, dict):
        verified = {}
    return [name for name in files if verified.get(name) != _stat_stamp(folder / name)]


def record_verified(folder: Path, files) -> None:
    stamps = {name: _stat_stamp(folder / name) for name in files}
    tmp = folder / (VERIFIED + ".tmp")
    tmp.write_text(json.dumps(stamps))
    tmp.replace(folder / VERIFIED)


def write_manifest(folder: Path, source_sha: str) -> None:
    files = {}
    for path in sorted(folder.iterdir()):
        if path.is_file() and path.name not in ("manifest.json", VERIFIED, VERIFIED + ".tmp"):
            files[path.name] = {"size": path.stat().st_size, "sample": sample_digest(path), "crc32": file_crc32(path)}
    manifest = {"source_sha256": source_sha, "files": files, "format": CACHE_FORMAT}
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=1))


def verify_manifest(folder: Path, full: bool | str = False) -> str | None:
    """None when the cached folder is intact, else a sentence saying what is wrong.

    Every file's size and sampled digest are checked (14 ms for all three models). ``full=True`` also checks
    every file's CRC-32; ``full="changed"`` checks in full only the files whose size, mtime, ctime or inode
    changed since their last full check, and records the ones that pass. The loader uses "changed": a full
    CRC-32 of the three models costs 1.9 s (``python scripts/integrity_cost.py``), a quarter of a warm load,
    so it runs once after any change to a file instead of on every load.
    """
    manifest_path = folder / "manifest.json"
    if not manifest_path.exists():
        return NOT_PREPARED
    try:
        manifest = json.loads(manifest_path.read_text())
        files = manifest["files"]
    except (ValueError, KeyError, TypeError):
        return "has an unreadable manifest"
    if manifest.get("format") != CACHE_FORMAT:
        return "was written by an older version"
    for fname, info in files.items():
        path = folder / fname
        if not path.exists():
            return f"is missing {fname}"
        if path.stat().st_size != info["size"]:
            return f"has {fname} at the wrong size"
        if sample_digest(path) != info["sample"]:
            return f"fails the checksum of {fname}"
    in_full = list(files) if full is True else changed_files(folder, files) if full == "changed" else []
    for fname in in_full:
        info, path = files[fname], folder / fname
        if "crc32" in info and file_crc32(path) != info["crc32"]:
            return f"fails the full checksum of {fname}"
        if "sha256" in info and file_sha256(path) != info["sha256"]:  # manifests of older versions
            return f"fails the full checksum of {fname}"
    if full == "changed" and in_full:
        with contextlib.suppress(OSError):  # a read-only cache is checked in full on every load instead
            record_verified(folder, files)
    return None
