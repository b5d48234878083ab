"""Errors with messages meant for people: every one says what went wrong and what to do."""


class EnsembleError(Exception):
    """Base class: the message is shown to the user as it is (CLI, app, API)."""


class UnknownModelError(EnsembleError):
    """A model name that is neither embedded, a local folder, nor a hub id."""


class MissingPackageError(EnsembleError):
    """An embedded model whose PyPI package is not installed."""


class ModelLoadError(EnsembleError):
    """A model that exists but could not be loaded (offline hub, broken folder, bad cache)."""


class SettingsError(EnsembleError):
    """An invalid engine setting (lookahead 0, unknown fusion, negative eta, ...)."""


class InputError(EnsembleError):
    """Unusable input text (empty prompt, text that cannot be encoded)."""


class TraceFormatError(EnsembleError):
    """A trace file that is not a valid Ensemble Lens trace."""


class Cancelled(EnsembleError):
    """A run stopped by the user; the partial trace is still valid."""


class OutputError(EnsembleError):
    """An output path that cannot be written (missing folder, a directory, a device, no permission)."""


def name_list(names, limit: int = 10, width: int = 40) -> str:
    """Names for a message: at most ``limit`` of them, each cut to ``width`` characters, then how many more."""
    names = [str(n) for n in names]
    shown = [n if len(n) <= width else n[: width - 1] + "…" for n in names[:limit]]
    more = len(names) - len(shown)
    return ", ".join(shown) + (f" and {more:,} more" if more > 0 else "")


class EvaluationError(EnsembleError):
    """An evaluation that cannot run as asked (bad data file, incompatible resume, malformed summary)."""


class LlamaCppMissing(EnsembleError):
    """The llama.cpp runtime was asked for but ``llama-cpp-python`` is not installed."""


class MemberDied(EnsembleError):
    """A member's process (a Ray actor) stopped during a run; the next run starts a new one."""

    def __init__(self, member: str, pid: int | None = None):
        where = f" (pid {pid})" if pid else ""
        super().__init__(
            f"Member {member}'s process{where} stopped during the run. The trace so far is kept; run again to restart it."
        )
        self.member, self.pid = member, pid
