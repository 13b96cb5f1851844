"""Progress of a long job: units done, tokens/s and ETA, on one refreshed line or log lines."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from typing import TextIO


def format_count(n: float) -> str:
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.2f}{unit}"
    return f"{n:.0f}"


def format_duration(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


class PollingProgress:
    """Polls a `(done, tokens)` callback from a thread while the job runs elsewhere.

    Polling the job's durable output works the same for a local run and a remote runner, and
    counts only work that is really finished.
    """

    def __init__(
        self,
        poll: Callable[[], tuple[int, int]],
        total: int,
        *,
        already_done: int = 0,
        already_tokens: int = 0,
        interval: float = 1.0,
        stream: TextIO = sys.stderr,
    ) -> None:
        self._poll = poll
        self._total = total
        self._base = (already_done, already_tokens)
        self._interval = interval
        self._stream = stream
        self._tty = stream.isatty()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._start = time.monotonic()
        self._last_line = ""

    def __enter__(self) -> PollingProgress:
        self._start = time.monotonic()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._report(final=True)

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self._report(final=False)

    def _report(self, final: bool) -> None:
        done, tokens = self._poll()
        line = self._line(done, tokens)
        if self._tty:
            self._stream.write("\r" + line + ("\n" if final else ""))
            self._stream.flush()
        elif line != self._last_line or final:
            self._stream.write(line + "\n")
        self._last_line = line

    def _line(self, done: int, tokens: int) -> str:
        # Rate and ETA count only this run's work, not units finished before a resume.
        base_done, base_tokens = self._base
        elapsed = time.monotonic() - self._start
        new_done, new_tokens = done - base_done, tokens - base_tokens
        rate = new_tokens / elapsed if elapsed > 0 else 0.0
        remaining = self._total - done
        eta = format_duration(elapsed / new_done * remaining) if new_done else "?"
        return (
            f"units {done}/{self._total} | {format_count(tokens)} tokens | "
            f"{format_count(rate)} tokens/s | elapsed {format_duration(elapsed)} | ETA {eta}"
        )
