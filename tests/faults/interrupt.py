"""Ctrl-C at a named moment of a prepare run, whatever the machine's speed.

With `INTERRUPT_AT=MOMENT` set, the first process of the run to reach that moment sends SIGINT to
its process group, as a terminal's Ctrl-C does, once per `INTERRUPT_STATE_DIR`. A moment is the
start of an import, or a call of a function (before it runs, or after its `nth` call returns,
counted across processes). Installed by this directory's `sitecustomize`.
"""

from __future__ import annotations

import functools
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


MOMENTS = {
    "imports": Moment("apache_beam"),
    "planning": Moment("pipeline.prepare.planning", "make_plan"),
    "cleaning": Moment("pipeline.prepare.clean.unit_fingerprints", "fingerprint_unit", after_call=2),
    "units": Moment("pipeline.prepare.tokenize.unit", "process_unit", after_call=3),
    "finishing": Moment("pipeline.prepare.write.finalize", "write_outputs"),
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
        os.killpg(os.getpgrp(), signal.SIGINT)


def _calls_returned() -> int:
    number = 0
    while not _take(f"call-{number}"):
        number += 1
    return number + 1


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
                setattr(module, moment.function, _wrap(getattr(module, moment.function), moment))

        spec.loader = _Patching()
        return spec


def install() -> None:
    moment = os.environ.get("INTERRUPT_AT")
    if moment:
        sys.meta_path.insert(0, _Finder(MOMENTS[moment]))
