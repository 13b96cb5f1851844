"""Named points of a prepare or train run, and acting at one in whichever process of the run
reaches it.

A point is the start of an import, or a call of a function or method (`Class.method`) of a module:
the function is wrapped as its module finishes importing, in every process that imports it, spawned
or forked, since this directory's `sitecustomize` installs the hooks as each interpreter starts (a
function the module registers in `gc.callbacks` is wrapped there, `wrap_gc_callback`). What is done
there is the fault's (see the modules beside this one). Counts and one-of-a-kind events are files
made with O_EXCL in a state directory, so they hold across processes whatever their timing.
"""

from __future__ import annotations

import gc
import importlib.abc
import importlib.util
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Point:
    module: str
    attribute: str | None = (
        None  # a function or `Class.method`; None: as the module starts importing
    )


# The points of a prepare run that the faults act at.
IMPORTS = Point("apache_beam")
PLANNING = Point("pipeline.prepare.planning", "make_plan")
CLEANING = Point(
    "pipeline.prepare.clean.unit_fingerprints", "fingerprint_unit"
)  # one unit's first pass
UNITS = Point(
    "pipeline.prepare.tokenize.unit", "process_unit"
)  # one unit tokenized, written and recorded
FINISHING = Point("pipeline.prepare.write.finalize", "write_outputs")
PRISM = Point("apache_beam.runners.portability.prism_runner", "PrismRunner.run_pipeline")

# The point of an export that the faults act at: a chunk of a split's tokens written.
EXPORTING = Point("pipeline.export.targets", "_Flat.add")

# The points of a training run that the faults act at.
NUMPY_IMPORT = Point("numpy")
JAXLIB_IMPORT = Point("jaxlib._jax")  # jaxlib's extension module
# Registered in gc.callbacks as it imports.
JAX_GC_CALLBACK = Point("jax._src.lib", "_xla_gc_callback")
OPENING = Point("train.trainer", "_open")  # the run opens its data
STEP_FEED = Point("train.mesh", "one_row_per_device")  # once per step, as its batch is fed
# Once per checkpoint, inside Orbax's save: the loader's position written into the step's temporary
# directory, the model's arrays and the save's finishing rename still to come.
CHECKPOINT_WRITE = Point("train.checkpointing", "_AnyTopologyHandler.save")


def take(state_dir: str, name: str) -> bool:
    """True for the first caller across every process of the run, False for the others."""
    try:
        os.close(os.open(os.path.join(state_dir, name), os.O_CREAT | os.O_EXCL))
        return True
    except FileExistsError:
        return False


def number(state_dir: str, kind: str) -> int:
    """The next number, from 1, of `kind` across every process of the run."""
    n = 1
    while not take(state_dir, f"{kind}-{n}"):
        n += 1
    return n


def taken(state_dir: str, prefix: str) -> list[str]:
    return sorted(name for name in os.listdir(state_dir) if name.startswith(prefix))


def at_import(point: Point, act: Callable[[], None]) -> None:
    """Calls `act` as `point.module` starts importing."""
    sys.meta_path.insert(0, _Finder(point.module, act=act))


def wrap(point: Point, wrapper: Callable[[Callable], Callable]) -> None:
    """Replaces `point.attribute` of `point.module` by `wrapper(original)` once the module is
    imported."""

    def patch(module) -> None:
        owner, _, name = point.attribute.rpartition(".")
        target = getattr(module, owner) if owner else module
        setattr(target, name, wrapper(getattr(target, name)))

    sys.meta_path.insert(0, _Finder(point.module, patch=patch))


def wrap_gc_callback(point: Point, wrapper: Callable[[Callable], Callable]) -> None:
    """Replaces `point.attribute`, a function that `point.module` registers in `gc.callbacks` as it
    imports, there by `wrapper(original)`: the garbage collector calls the wrapper."""

    def patch(module) -> None:
        function = getattr(module, point.attribute)
        gc.callbacks[gc.callbacks.index(function)] = wrapper(function)

    sys.meta_path.insert(0, _Finder(point.module, patch=patch))


class _Finder(importlib.abc.MetaPathFinder):
    def __init__(
        self, module: str, *, act: Callable[[], None] | None = None, patch: Callable | None = None
    ):
        self._module, self._act, self._patch = module, act, patch

    def find_spec(self, name, path, target=None):
        if name != self._module:
            return None
        if self._act is not None:
            self._act()
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        loader, patch = spec.loader, self._patch

        class _Patching(importlib.abc.Loader):
            def create_module(self, spec):
                return loader.create_module(spec)

            def exec_module(self, module):
                loader.exec_module(module)
                patch(module)

        spec.loader = _Patching()
        return spec
