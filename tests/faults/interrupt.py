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
import gc
import importlib.abc
import importlib.util
import os
import signal
import sys
from dataclasses import dataclass


@dataclass(frozen=True)
class Moment:
    module: str
    function: str | None = None  # None: as the module starts importing
    after_call: int = 0  # 0: before the first call; n: once the n-th call has returned
    gc_callback: bool = False  # `function` is a gc callback: the signal comes inside its n-th call
    counted_after: str | None = None  # a gc callback's calls count once this module has finished importing


MOMENTS = {
    "imports": Moment("apache_beam"),
    "planning": Moment("pipeline.prepare.planning", "make_plan"),
    "cleaning": Moment("pipeline.prepare.clean.unit_fingerprints", "fingerprint_unit", after_call=2),
    "units": Moment("pipeline.prepare.tokenize.unit", "process_unit", after_call=3),
    "finishing": Moment("pipeline.prepare.write.finalize", "write_outputs"),
}
# The trainer's: as numpy and as jaxlib's extension start loading, inside JAX's garbage-collector
# callback, as the run opens its data, and in its third step.
TRAIN_MOMENTS = {
    "numpy-import": Moment("numpy"),
    "jaxlib-import": Moment("jaxlib._jax"),
    # Once the trainer is loaded: an interrupt while modules load is held back, not lost.
    "gc-callback": Moment("jax._src.lib", "_xla_gc_callback", after_call=1, gc_callback=True,
                          counted_after="train.trainer"),
    "opening": Moment("train.trainer", "_open"),
    "step-3": Moment("train.mesh", "one_row_per_device", after_call=3),
}


def _take(name: str) -> bool:
    """One of a kind across every process of the run."""
    try:
        os.close(os.open(os.path.join(os.environ["INTERRUPT_STATE_DIR"], name), os.O_CREAT | os.O_EXCL))
        return True
    except FileExistsError:
        return False


def _interrupt() -> None:
    if _take("sent"):
        os.killpg(os.getpgrp(), getattr(signal, os.environ.get("INTERRUPT_SIGNAL", "SIGINT")))


def _calls_returned() -> int:
    number = 0
    while not _take(f"call-{number}"):
        number += 1
    return number + 1


def _imported(name: str) -> bool:
    module = sys.modules.get(name)
    return module is not None and not getattr(module.__spec__, "_initializing", False)


def _in_gc_callback(callback, moment: Moment):
    calls = [0]  # in this process: the collector calls it in every process alike

    @functools.wraps(callback)
    def wrapper(*args):
        if moment.counted_after and not _imported(moment.counted_after):
            return callback(*args)
        calls[0] += 1
        if calls[0] == moment.after_call:
            _interrupt()  # handled at the next instruction: the callback's own
        return callback(*args)

    return wrapper


def _wrap(function, moment: Moment):
    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        if not moment.after_call:
            _interrupt()
        result = function(*args, **kwargs)
        if moment.after_call and _calls_returned() == moment.after_call:
            _interrupt()
        return result

    return wrapper


class _Finder(importlib.abc.MetaPathFinder):
    def __init__(self, moment: Moment):
        self._moment = moment

    def find_spec(self, name, path, target=None):
        if name != self._moment.module:
            return None
        if self._moment.function is None:
            _interrupt()
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        loader, moment = spec.loader, self._moment

        class _Patching(importlib.abc.Loader):
            def create_module(self, spec):
                return loader.create_module(spec)

            def exec_module(self, module):
                loader.exec_module(module)
                function = getattr(module, moment.function)
                if moment.gc_callback:
                    gc.callbacks[gc.callbacks.index(function)] = _in_gc_callback(function, moment)
                else:
                    setattr(module, moment.function, _wrap(function, moment))

        spec.loader = _Patching()
        return spec


def install() -> None:
    moment = os.environ.get("INTERRUPT_AT")
    if moment:
        sys.meta_path.insert(0, _Finder({**MOMENTS, **TRAIN_MOMENTS}[moment]))
