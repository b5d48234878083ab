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
