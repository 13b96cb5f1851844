"""When a long job writes a plain progress line off a terminal, and how its counts and times read:
prepare's and train's logs share both.

A line every 30 seconds or every tenth of the work, whichever comes first, and at the end: a log
file then holds a few dozen lines, not one carriage-return update per tick.
"""

from __future__ import annotations

LOG_EVERY_SECONDS = 30.0
LOG_EVERY_FRACTION = 0.1


class LogCadence:
    def __init__(self, total: int, *, done: int, now: float) -> None:
        self._every = max(1, int(total * LOG_EVERY_FRACTION))
        self._logged_at, self._logged_done = now, done

    def due(self, done: int, now: float, *, final: bool = False) -> bool:
        """Whether a line is due at `done` units of work; a due line counts as written."""
        if (
            final
            or now - self._logged_at >= LOG_EVERY_SECONDS
            or done - self._logged_done >= self._every
        ):
            self._logged_at, self._logged_done = now, done
            return True
        return False


def format_count(n: float) -> str:
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.2f}{unit}"
    return f"{n:.0f}"


def format_duration(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
