"""Telling a passing fault from a lasting one, and retrying a unit through the passing kind.

A transient error (a dropped connection, a timeout, an object store's 429 or 5xx) says nothing
about the data, so the unit is tried again, a bounded number of times with backoff; if it persists,
the unit fails and a rerun tries it again. Content errors (an exception class with a true
`deterministic` attribute) and local conditions that retrying cannot fix (a missing file, no space
left, no permission) are never retried.
"""

from __future__ import annotations

import errno
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

ATTEMPTS = 4
FIRST_BACKOFF_SECONDS = 1.0
_LASTING_ERRNOS = {
    errno.ENOENT,
    errno.ENOSPC,
    errno.EDQUOT,
    errno.EROFS,
    errno.EACCES,
    errno.EPERM,
    errno.EISDIR,
    errno.ENOTDIR,
    errno.EFBIG,
    errno.ENAMETOOLONG,
}
_TRANSIENT_HTTP = {408, 429, 500, 502, 503, 504}


def _http_status(error: BaseException) -> int | None:
    """The HTTP status a client library's error carries (google-api-core, apitools, requests)."""
    for attribute in ("code", "status_code", "status"):
        value = getattr(error, attribute, None)
        if isinstance(value, int):
            return value
    response = getattr(error, "response", None)
    status = getattr(response, "status_code", None) or getattr(response, "status", None)
    return status if isinstance(status, int) else None


def is_transient(error: BaseException | None) -> bool:
    """Whether trying again may succeed. Follows the cause chain: Beam wraps client errors."""
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if getattr(error, "deterministic", False):
            return False
        if isinstance(error, (ConnectionError, TimeoutError)):
            return True
        if isinstance(error, OSError) and error.errno is not None:
            return error.errno not in _LASTING_ERRNOS
        status = _http_status(error)
        if status is not None:
            return status in _TRANSIENT_HTTP
        error = error.__cause__ or (None if error.__suppress_context__ else error.__context__)
    return False


def with_retries(
    attempt: Callable[[], T],
    *,
    attempts: int = ATTEMPTS,
    backoff: float = FIRST_BACKOFF_SECONDS,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """`attempt()`, again after a transient error, waiting `backoff`, then twice as long, and so
    on."""
    failures = 0
    while True:
        try:
            return attempt()
        except Exception as e:
            failures += 1
            if failures == attempts or not is_transient(e):
                raise
        sleep(backoff * 2 ** (failures - 1))
