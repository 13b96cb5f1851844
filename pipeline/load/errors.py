"""The one error type of the loader, so callers catch a single thing."""


class LoaderError(ValueError):
    """A prepared directory, a data spec or a loader config that cannot work; the message says how to fix it."""
