"""Progress of a long job: units done, its rate (tokens/s, or input MB/s) and ETA, on one refreshed
line or log lines.

On a terminal the line is refreshed every poll. Elsewhere (CI logs, a Dataflow launcher's log) a
line is written every 30 seconds or every tenth of the units, whichever comes first, so an hour's
run logs a few hundred lines, not thousands.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO

from pipeline.cli.log_cadence import LogCadence, format_count, format_duration

TOKENS, BYTES = "tokens", "bytes"  # what a job's amount of work counts


def _amount(n: float, unit: str) -> str:
    return f"{format_count(n)} tokens" if unit == TOKENS else f"{n / 1e6:.1f} MB"


class Progress:
    """Reports a job's progress whenever `tick` finds a report due; `poll` returns (units, amount),
    the amount in `unit`: tokens written (tokenizing) or input bytes read (cleaning).

    Polling the job's durable output works the same for a local run and a remote runner, and
    counts only work that is really finished. It runs in whatever loop watches the job: no thread
    of its own, so the launcher stays single-threaded.
    """

    def __init__(
        self,
        poll: Callable[[], tuple[int, int]],
        total: int,
        *,
        already_done: int = 0,
        already_amount: int = 0,
        unit: str = TOKENS,
        interval: float = 1.0,
        stream: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._poll = poll
        self._total = total
        self._base = (already_done, already_amount)
        self._unit = unit
        self._interval = interval
        self._stream = stream or sys.stderr  # the one at the time: a test's capture, say
        self._tty = self._stream.isatty()
        self._clock = clock
        self._start = self._polled_at = clock()
        self._cadence = LogCadence(total, done=already_done, now=self._start)

    def tick(self) -> None:
        if self._clock() - self._polled_at >= self._interval:
            self._report(final=False)

    def finish(self) -> None:
        self._report(final=True)

    def _report(self, final: bool) -> None:
        done, amount = self._poll()
        now = self._polled_at = self._clock()
        line = self._line(done, amount, now)
        if self._tty:
            self._stream.write("\r" + line + ("\n" if final else ""))
        elif self._cadence.due(done, now, final=final):
            self._stream.write(line + "\n")
        self._stream.flush()

    def _line(self, done: int, amount: int, now: float) -> str:
        # Rate and ETA count only this run's work, not units finished before a resume.
        base_done, base_amount = self._base
        elapsed = now - self._start
        new_done, new_amount = done - base_done, amount - base_amount
        rate = new_amount / elapsed if elapsed > 0 else 0.0
        remaining = self._total - done
        eta = format_duration(elapsed / new_done * remaining) if new_done else "?"
        return (
            f"units {done}/{self._total} | {_amount(amount, self._unit)} | "
            f"{_amount(rate, self._unit)}/s | elapsed {format_duration(elapsed)} | ETA {eta}"
        )
