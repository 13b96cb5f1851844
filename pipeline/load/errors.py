"""The one error type of the loader, so callers catch a single thing."""

from schemas.errors import RunError, SettingError


class LoaderError(RunError, ValueError):
    """A prepared directory, a data spec or a loader config that cannot work; the message says how
    to fix it."""


class LoaderSettingError(SettingError, LoaderError):
    """A loader setting out of its range: a usage error, named as a setting (schemas/errors.py)."""
