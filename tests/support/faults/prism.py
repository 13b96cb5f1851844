"""Beam's Prism runner, stood in for in every process of a run: with `PRISM_STATE_DIR` set, a call
of `PrismRunner.run_pipeline` leaves `tried` there and fails, as Prism does where its binary cannot
be fetched (Beam's DirectRunner then falls back to its Python runner). Each interpreter of the run
also leaves `interpreter-PID`, so a test can tell that a job was spawned, not forked. Installed by
this directory's `sitecustomize`."""

from __future__ import annotations

import functools
import os

import points


def _tried(function):
    @functools.wraps(function)
    def wrapped(*args, **kwargs):
        points.take(os.environ["PRISM_STATE_DIR"], "tried")
        raise RuntimeError("no Prism here (a test's stand-in)")

    return wrapped


def install() -> None:
    points.take(os.environ["PRISM_STATE_DIR"], f"interpreter-{os.getpid()}")
    points.wrap(points.PRISM, _tried)
