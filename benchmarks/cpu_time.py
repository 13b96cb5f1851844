"""CPU seconds of this process, fewest over a few rounds: the machine's load moves them far less
than wall time, so a ratio of two stays steady on a busy machine."""

from __future__ import annotations

import time
from collections.abc import Callable


def fewest_cpu_seconds(rounds: int, work: Callable[..., object], *args: object) -> float:
    """The fewest CPU seconds of this process that `work(*args)` took in `rounds` calls."""
    best = float("inf")
    for _ in range(rounds):
        started = time.process_time()
        work(*args)
        best = min(best, time.process_time() - started)
    return best
