"""Small argument helpers shared by the commands."""

from __future__ import annotations

from ..errors import SettingsError


def models_arg(value: str) -> list[str]:
    names = [n.strip() for n in (value or "").split(",") if n.strip()]
    if not names:
        raise SettingsError("--models needs at least one model name, e.g. --models qwen,smollm2,gemma3")
    return names


def read_text(path: str, errors: str) -> str:
    try:
        with open(path, encoding="utf-8", errors=errors) as fh:
            return fh.read()
    except OSError as exc:
        raise SettingsError(f"Cannot read {path}: {exc.strerror or exc}; check the file name.") from exc


def read_bytes(path: str, limit: int = 64 * 1024 * 1024) -> bytes:
    """A file's bytes (at most ``limit`` of them are read: callers check sizes with their own, clearer limits)."""
    try:
        with open(path, "rb") as fh:
            return fh.read(limit)
    except OSError as exc:
        raise SettingsError(f"Cannot read {path}: {exc.strerror or exc}; check the file name.") from exc


def write_document(path: str, view: str, *args) -> None:
    """Write one of ``visual``'s standalone HTML documents (``run_document``, ``tokenizers_document``) to ``path``.
    The command line may draw with ``visual``; it is imported here, when asked for, never by the engine."""
    import visual

    from ..files import write_output

    write_output(path, getattr(visual, view)(*args))
