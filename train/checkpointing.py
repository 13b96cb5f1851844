"""Orbax checkpoints of model, optimizer (its step included), the loader's position, and the feed:
the data it is a position in (each source's manifest digest) and, for a mixture, the target tokens
each source has given so far.

Model and optimizer restore onto whatever shardings the new mesh gives them (Orbax reshards), and
the loader's position is global (the same on every process), so a run resumes on any mesh and any
number of processes whose data axis divides the global batch.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import sys
import time
import traceback
from collections.abc import Iterator
from typing import Any

import grain
import jax
import orbax.checkpoint as ocp
from etils import epath
from flax import nnx

from model.gpt import GPT
from pipeline.cli import interrupts
from train.errors import TrainError
from train.stopping import CheckpointError

CHECKPOINT_DIR = "checkpoints"
# Where Orbax writes a step's checkpoint until it is whole: `8.orbax-checkpoint-tmp`, or with a
# timestamp after it on some filesystems.
_TEMPORARY = ".orbax-checkpoint-tmp"


def in_background() -> bool:
    """Whether checkpoints are written while the next steps run: on accelerators, whose host is idle
    while they compute; not on CPU devices, where the step computes on the host's cores."""
    return jax.devices()[0].platform != "cpu"


def _through_orbax(record: logging.LogRecord) -> bool:
    """Whether an error record comes from Orbax's code, or reports an exception raised in it."""
    inside = f"{os.sep}orbax{os.sep}"
    trace = record.exc_info[2] if record.exc_info else None
    return record.levelno >= logging.ERROR and (
        inside in record.pathname
        or any(inside in frame.f_code.co_filename for frame, _ in traceback.walk_tb(trace))
    )


class _OrbaxFailures(logging.Filter):
    """The errors a failed save logs besides raising: Orbax's own (with their tracebacks, once per
    thread that saw it), and asyncio's `exception was never retrieved` for the gathered writes
    whose failure the first one's already raised, logged whenever the futures are collected. The
    failure is raised again to the loop, which reports it in one line."""

    LOGGERS = ("absl", "asyncio")

    def filter(self, record: logging.LogRecord) -> bool:
        return not _through_orbax(record)


def _without_closed_loop_writes(hook):
    """`hook` (an unraisable hook) but for the writes that TensorStore finishes after a failed
    save's event loop closed: each one an unraisable `RuntimeError: Event loop is closed`."""

    def unraisable(unraisable) -> None:
        if not (
            isinstance(unraisable.exc_value, RuntimeError)
            and str(unraisable.exc_value) == "Event loop is closed"
        ):
            hook(unraisable)

    unraisable.without_closed_loop_writes = True
    return unraisable


@contextlib.contextmanager
def _quiet_failures() -> Iterator[None]:
    """While checkpoints are written: a failed save's logged errors are left to the loop's one line,
    and so are the writes that TensorStore finishes after its event loop closed."""
    quiet = _OrbaxFailures()
    for name in _OrbaxFailures.LOGGERS:
        logging.getLogger(name).addFilter(quiet)
    hook = sys.unraisablehook
    sys.unraisablehook = _without_closed_loop_writes(hook)
    try:
        yield
    finally:
        sys.unraisablehook = hook
        for name in _OrbaxFailures.LOGGERS:
            logging.getLogger(name).removeFilter(quiet)


_AFTER_FAILURE = _OrbaxFailures()


def _quiet_failed_writes_from_now_on() -> None:
    """Once a save failed, for the rest of the process: TensorStore finishes its writes, and the
    garbage collector reports their unretrieved futures, whenever they come, after the checkpointer
    is closed too (as the run prints its error line and exits)."""
    if not getattr(sys.unraisablehook, "without_closed_loop_writes", False):
        sys.unraisablehook = _without_closed_loop_writes(sys.unraisablehook)
    for name in _OrbaxFailures.LOGGERS:
        logging.getLogger(name).addFilter(_AFTER_FAILURE)  # once: a filter already there is kept


class _AnyTopologyHandler(grain.checkpoint.CheckpointHandler):
    """Grain's iterator handler, restoring on another number of processes too.

    Grain keeps one file per process, named by the process index and count. Every process of a run
    saves the same global position, so a process whose own file is missing (the run was saved on
    another number of processes) restores process 0's.
    """

    def restore(self, directory: epath.Path, item: Any = None, args: Any = None) -> Any:
        item = item or args.item
        own = directory / f"process_{jax.process_index()}-of-{jax.process_count()}.json"
        if own.exists():
            return super().restore(directory, item=item)
        saved = sorted(directory.glob("process_0-of-*.json"))
        if not saved:
            raise TrainError(
                f"{directory} holds no loader position (process_0-of-N.json); the checkpoint is "
                "incomplete"
            )
        item.set_state(json.loads(saved[0].read_text()))
        return item


@ocp.args.register_with_handler(_AnyTopologyHandler, for_save=True)
@dataclasses.dataclass
class _PositionSave(ocp.args.CheckpointArgs):
    item: Any


@ocp.args.register_with_handler(_AnyTopologyHandler, for_restore=True)
@dataclasses.dataclass
class _PositionRestore(ocp.args.CheckpointArgs):
    item: Any


class Checkpointer:
    """Every `every` steps and at the last, keeping the last `keep`; the data position travels with
    the weights, so a restored run reads exactly the batches the uninterrupted one would have.

    Saves are asynchronous on accelerators: `save` returns once the state is copied off the device,
    and Orbax writes it in the background into a temporary directory that is renamed into place
    when whole, so a run killed mid-save leaves the previous checkpoint as the latest. A save still
    in flight is finished before the next one starts and before `close` returns. On CPU devices
    (`background` False) `save` writes the checkpoint before it returns: the step computes on the
    host's own cores, so a background write takes them from it, and costs the loop more than
    writing at once (benchmarks/checkpoint_cost.py, docs/performance.md).

    A save that fails raises `CheckpointError` in the loop, at once where the step's directory
    cannot be made (Orbax makes it before `save` returns, not in the background, where a failure
    left the save waiting 300 s for a signal that never came), or at the first `check` after the
    background write failed; its temporary directory is removed, so a full disk gets its space
    back. A Ctrl-C while a save is started or waited for is held until the save is whole: one
    interrupted inside Orbax leaves its temporary directory, and Orbax's threads writing into a
    closed pool.
    """

    def __init__(self, workdir: str, *, every: int, keep: int, background: bool | None = None):
        self.directory = os.path.join(os.path.abspath(workdir), CHECKPOINT_DIR)
        self.every = every
        self.background = in_background() if background is None else background
        self.saved: int | None = None  # the latest step saved (its write finished or in flight)
        self._unchecked: int | None = (
            None  # a step whose background write is not known to have succeeded
        )
        self._failed = (
            False  # a save failed: its writes may still return once the checkpointer is closed
        )
        self._quiet = contextlib.ExitStack()
        self._quiet.enter_context(_quiet_failures())
        # The loop says when to save: Orbax's own policy would also save the first step of every
        # start.
        try:
            self._manager = ocp.CheckpointManager(
                self.directory,
                item_names=("state", "data", "feed"),
                options=ocp.CheckpointManagerOptions(
                    max_to_keep=keep,
                    enable_async_checkpointing=self.background,
                    async_options=ocp.AsyncOptions(create_directories_asynchronously=False),
                ),
            )
        except OSError as e:
            self._quiet.close()
            raise CheckpointError(None, self.directory, e) from None

    def probe(self) -> None:
        """Refuses a checkpoint directory that cannot be written now, before the run trains up to
        its first checkpoint: a directory made and removed in it."""
        probe = epath.Path(self.directory) / f".probe-{jax.process_index()}-{os.getpid()}"
        try:
            probe.mkdir(parents=True, exist_ok=True)
            probe.rmdir()
        except OSError as e:
            raise CheckpointError(None, self.directory, e) from None

    def latest_step(self) -> int | None:
        return self._manager.latest_step()

    def check(self) -> None:
        """Raises `CheckpointError` if the background write of the last save failed; cheap while it
        runs or once it is known to have succeeded."""
        if self._unchecked is not None and not self._manager.is_saving_in_progress():
            self._finish()

    def _finish(self) -> None:
        """Waits for the save in flight; its failure is a `CheckpointError`."""
        step, self._unchecked = self._unchecked, None
        try:
            with interrupts.deferred():
                self._manager.wait_until_finished()
        except Exception as e:  # noqa: BLE001 (whatever the store raised: OSError, TensorStore's ValueError)
            if step is None:
                raise
            raise self._failure(step, e) from None

    def _failure(self, step: int, error: BaseException) -> CheckpointError:
        """The error of the failed save of `step`, once its temporary directory is removed (by
        process 0: the directory is every process's)."""
        self._failed = True
        partial = (
            list(epath.Path(self.directory).glob(f"{step}{_TEMPORARY}*"))
            if jax.process_index() == 0
            else []
        )
        left = []
        for path in partial:
            try:
                path.rmtree()
            except OSError:
                left.append(str(path))
        return CheckpointError(
            step, self.directory, error, removed=len(partial) > len(left), left=left
        )

    def due(self, step: int, *, last: int) -> bool:
        return step % self.every == 0 or step == last

    def save(
        self, step: int, state: nnx.State, iterator: grain.DatasetIterator, feed: dict
    ) -> float:
        """Starts saving `state` (model and optimizer, `train.step.split`), the loader's position
        and the feed (writes them, without `background`); returns the seconds spent waiting for the
        previous save to finish writing."""
        began = time.perf_counter()
        self._finish()
        waited = time.perf_counter() - began
        items = {
            "state": ocp.args.StandardSave(state),
            "data": _PositionSave(iterator),
            "feed": ocp.args.JsonSave(feed),
        }
        try:
            with interrupts.deferred():
                self._manager.save(step, args=ocp.args.Composite(**items), force=True)
        except Exception as e:  # noqa: BLE001 (the step's directory could not be made, or the copy failed)
            raise self._failure(step, e) from None
        self.saved = self._unchecked = step
        if not self.background:
            self._finish()
        return waited

    def restore(
        self, step: int, state: nnx.State, iterator: grain.DatasetIterator, *, data: dict[str, str]
    ) -> tuple[nnx.State, dict]:
        """The saved state, on the shardings of `state` (a freshly built one), and the saved feed;
        the iterator is moved to the saved position. Refuses a checkpoint of other `data` (source
        name -> manifest digest): its position would index another stream of records."""
        feed = self._manager.restore(step, args=ocp.args.Composite(feed=ocp.args.JsonRestore()))[
            "feed"
        ]
        for name, digest in data.items():
            if feed["data"].get(name) != digest:
                raise TrainError(
                    f"source {name!r} is not the data the checkpoint at step {step} was trained "
                    "on: its manifest changed (prepared again, or another directory); resume on "
                    "the same data, or use another --workdir"
                )
        items = {"state": ocp.args.StandardRestore(state), "data": _PositionRestore(iterator)}
        return self._manager.restore(step, args=ocp.args.Composite(**items))["state"], feed

    def restore_model(self, step: int, model: GPT) -> None:
        """The model's weights alone: the optimizer state is neither built nor read."""
        target = {"model": nnx.state(model)}
        args = ocp.args.PyTreeRestore(
            item=target,
            restore_args=ocp.checkpoint_utils.construct_restore_args(target),
            partial_restore=True,
        )
        restored = self._manager.restore(step, args=ocp.args.Composite(state=args))
        nnx.update(model, restored["state"]["model"])

    def close(self, *, failing: bool = False) -> None:
        """Waits for a save in flight to be written whole. `failing`: the run is ending on an error
        of its own, which a failure of that save would only hide."""
        error = None
        try:
            try:
                self._finish()
            except CheckpointError as e:
                error = e
            try:
                self._manager.close()
            except Exception:  # noqa: BLE001
                if error is None and not failing:
                    raise
        finally:
            self._quiet.close()
            if self._failed:
                _quiet_failed_writes_from_now_on()
        if error is not None and not failing:
            raise error
