"""Ctrl-C at a named moment of a prepare or train run, whatever the machine's speed.

With `INTERRUPT_AT=MOMENT` set, the first process of the run to reach that moment sends SIGINT to
its process group, as a terminal's Ctrl-C does, once per `INTERRUPT_STATE_DIR` (`INTERRUPT_SIGNAL=
SIGTERM` sends that instead, as a preempting scheduler does). A moment is the start of an import,
or a call of a function (before it runs, or after its `nth` call returns, counted across
processes), or, for a function that the module registers in `gc.callbacks`, its `nth` call as the
garbage collector makes it: the signal then lands inside the callback, where Python cannot raise
it. Installed by this directory's `sitecustomize`.
"""

from __future__ import annotations

import functools
import os
import signal
import sys
from dataclasses import dataclass

import points


@dataclass(frozen=True)
class Moment:
    point: points.Point
    after_call: int = 0  # 0: before the first call; n: once the n-th call has returned
    gc_callback: bool = False  # the point is a gc callback: the signal comes inside its n-th call
    counted_after: str | None = (
        None  # a gc callback's calls count once this module has finished importing
    )


MOMENTS = {
    "imports": Moment(points.IMPORTS),
    "planning": Moment(points.PLANNING),
    "cleaning": Moment(points.CLEANING, after_call=2),
    "units": Moment(points.UNITS, after_call=3),
    "finishing": Moment(points.FINISHING),
}
# The trainer's: as numpy and as jaxlib's extension start loading, inside JAX's garbage-collector
# callback, as the run opens its data, in its third step, and inside the save of its second
# checkpoint.
TRAIN_MOMENTS = {
    "numpy-import": Moment(points.NUMPY_IMPORT),
    "jaxlib-import": Moment(points.JAXLIB_IMPORT),
    # Once the trainer is loaded: an interrupt while modules load is held back, not lost.
    "gc-callback": Moment(
        points.JAX_GC_CALLBACK, after_call=1, gc_callback=True, counted_after="train.trainer"
    ),
    "opening": Moment(points.OPENING),
    "step-3": Moment(points.STEP_FEED, after_call=3),
    "checkpoint-2": Moment(points.CHECKPOINT_WRITE, after_call=2),
}

# An export's: once its first chunk of tokens is written, the files half done.
EXPORT_MOMENTS = {"exporting": Moment(points.EXPORTING, after_call=1)}


def _interrupt() -> None:
    if points.take(os.environ["INTERRUPT_STATE_DIR"], "sent"):
        os.killpg(os.getpgrp(), getattr(signal, os.environ.get("INTERRUPT_SIGNAL", "SIGINT")))


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


def _imported(name: str) -> bool:
    module = sys.modules.get(name)
    return module is not None and not getattr(module.__spec__, "_initializing", False)


def _in_gc_callback(moment: Moment):
    def wrapper(callback):
        calls = [0]  # in this process: the collector calls it in every process alike

        @functools.wraps(callback)
        def wrapped(*args):
            if moment.counted_after and not _imported(moment.counted_after):
                return callback(*args)
            calls[0] += 1
            if calls[0] == moment.after_call:
                _interrupt()  # handled at the next instruction: the callback's own
            return callback(*args)

        return wrapped

    return wrapper


def install() -> None:
    moment = {**MOMENTS, **TRAIN_MOMENTS, **EXPORT_MOMENTS}[os.environ["INTERRUPT_AT"]]
    if moment.point.attribute is None:
        points.at_import(moment.point, _interrupt)
    elif moment.gc_callback:
        points.wrap_gc_callback(moment.point, _in_gc_callback(moment))
    else:
        points.wrap(moment.point, _wrapper(moment))
