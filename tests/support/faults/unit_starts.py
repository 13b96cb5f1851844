"""The units that start a pass of a prepare run, counted, and a SIGKILL part-way through it,
whatever the machine's speed.

With `UNITS_PASS=PASS` ("cleaning" or "units") and `UNITS_STATE_DIR` set, each unit that starts the
pass leaves `started-K` there, K counting from 1 across every process of the run. With
`KILL_AFTER=N` too, the unit that starts after N others SIGKILLs its process group (the launcher,
the job and every worker) before doing any work, as a crash or the kernel's out-of-memory killer
would, and leaves `killed`. The process that starts it has finished the unit it started before, so
with N at least the number of worker processes some unit's record is there, and at most N are: a
kill part-way, never before the first record or after the last. Installed by this directory's
`sitecustomize`.
"""

from __future__ import annotations

import functools
import os
import signal
import sys

import points

PASSES = {"cleaning": points.CLEANING, "units": points.UNITS}


def _counting(state: str, kill_after: int):
    def wrapper(function):
        @functools.wraps(function)
        def wrapped(*args, **kwargs):
            if points.number(state, "started") > kill_after:
                points.take(state, "killed")
                os.killpg(os.getpgrp(), signal.SIGKILL)
            return function(*args, **kwargs)

        return wrapped

    return wrapper


def install() -> None:
    kill_after = int(os.environ.get("KILL_AFTER", sys.maxsize))
    points.wrap(
        PASSES[os.environ["UNITS_PASS"]], _counting(os.environ["UNITS_STATE_DIR"], kill_after)
    )
