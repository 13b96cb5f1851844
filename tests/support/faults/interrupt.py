"""Ctrl-C at a named moment of a prepare run, whatever the machine's speed.

With `INTERRUPT_AT=MOMENT` set, the first process of the run to reach that moment sends SIGINT to
its process group, as a terminal's Ctrl-C does, once per `INTERRUPT_STATE_DIR`. A moment is the
start of an import, or a call of a function (before it runs, or after its `nth` call returns,
counted across processes). Installed by this directory's `sitecustomize`.
"""

from __future__ import annotations

import functools
import os
import signal
from dataclasses import dataclass

import points


@dataclass(frozen=True)
class Moment:
    point: points.Point
    after_call: int = 0  # 0: before the first call; n: once the n-th call has returned


MOMENTS = {
    "imports": Moment(points.IMPORTS),
    "planning": Moment(points.PLANNING),
    "cleaning": Moment(points.CLEANING, after_call=2),
    "units": Moment(points.UNITS, after_call=3),
    "finishing": Moment(points.FINISHING),
}


def _interrupt() -> None:
    if points.take(os.environ["INTERRUPT_STATE_DIR"], "sent"):
        os.killpg(os.getpgrp(), signal.SIGINT)


def _wrapper(moment: Moment):
    def wrapper(function):
        @functools.wraps(function)
        def wrapped(*args, **kwargs):
            if not moment.after_call:
                _interrupt()
            result = function(*args, **kwargs)
            if (
                moment.after_call
                and points.number(os.environ["INTERRUPT_STATE_DIR"], "call") == moment.after_call
            ):
                _interrupt()
            return result

        return wrapped

    return wrapper


def install() -> None:
    moment = MOMENTS[os.environ["INTERRUPT_AT"]]
    if moment.point.attribute is None:
        points.at_import(moment.point, _interrupt)
    else:
        points.wrap(moment.point, _wrapper(moment))
