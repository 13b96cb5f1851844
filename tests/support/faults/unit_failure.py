"""A unit that fails while another is still at work, whatever the machine's speed.

With `FAIL_UNIT=N`, the N-th unit to start (counted across processes) waits until the next one has
started, then raises `RuntimeError("injected failure")`. Every unit that starts after it is held
there for good (`held-K` in `FAIL_STATE_DIR`), as a long unit would be: a run that waits for the
units still at work never ends. A unit started once the run's failure is recorded is marked
`late-K`: the run must not start work after a failure. Installed by this directory's
`sitecustomize`; the point is `process_unit`, whose second argument is the run's context.
"""

from __future__ import annotations

import functools
import os
import time

import points


def _failing(failing: int):
    state = os.environ["FAIL_STATE_DIR"]

    def wrapper(function):
        @functools.wraps(function)
        def wrapped(unit, context, *args, **kwargs):
            started = points.number(state, "started")
            if any(name.endswith(".json") for name in os.listdir(context.failures_dir)):
                points.take(state, f"late-{started}")
            if started == failing:
                while not os.path.exists(os.path.join(state, f"started-{failing + 1}")):
                    time.sleep(0.01)
                raise RuntimeError("injected failure")
            if started > failing:
                points.take(state, f"held-{started}")
                while True:
                    time.sleep(60)
            return function(unit, context, *args, **kwargs)

        return wrapped

    return wrapper


def install() -> None:
    points.wrap(points.UNITS, _failing(int(os.environ["FAIL_UNIT"])))
