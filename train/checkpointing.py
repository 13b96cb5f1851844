"""Orbax checkpoints of model, optimizer (its step included), the loader's position, and the feed:
the data it is a position in (each source's manifest digest) and, for a mixture, the target tokens
each source has given so far.

Model and optimizer restore onto whatever shardings the new mesh gives them (Orbax reshards), and
the loader's position is global (the same on every process), so a run resumes on any mesh and any
number of processes whose data axis divides the global batch.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from typing import Any

import grain
import jax
import orbax.checkpoint as ocp
from etils import epath
from flax import nnx

from model.gpt import GPT
from train.errors import TrainError

CHECKPOINT_DIR = "checkpoints"


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

    Saves are asynchronous: `save` returns once the state is copied off the device, and Orbax
    writes it in the background into a temporary directory that is renamed into place when whole,
    so a run killed mid-save leaves the previous checkpoint as the latest. A save still in flight is
    finished before the next one starts and before `close` returns.
    """

    def __init__(self, workdir: str, *, every: int, keep: int):
        self.directory = os.path.join(os.path.abspath(workdir), CHECKPOINT_DIR)
        self.every = every
        # The loop says when to save: Orbax's own policy would also save the first step of every
        # start.
        self._manager = ocp.CheckpointManager(
            self.directory,
            item_names=("state", "data", "feed"),
            options=ocp.CheckpointManagerOptions(max_to_keep=keep, enable_async_checkpointing=True),
        )

    def latest_step(self) -> int | None:
        return self._manager.latest_step()

    def due(self, step: int, *, last: int) -> bool:
        return step % self.every == 0 or step == last

    def save(
        self, step: int, state: nnx.State, iterator: grain.DatasetIterator, feed: dict
    ) -> float:
        """Starts saving `state` (model and optimizer, `train.step.split`), the loader's position
        and the feed; returns the seconds spent waiting for the previous save to finish writing."""
        began = time.perf_counter()
        self._manager.wait_until_finished()
        waited = time.perf_counter() - began
        items = {
            "state": ocp.args.StandardSave(state),
            "data": _PositionSave(iterator),
            "feed": ocp.args.JsonSave(feed),
        }
        self._manager.save(step, args=ocp.args.Composite(**items), force=True)
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

    def close(self) -> None:
        """Waits for a save in flight to be written whole."""
        self._manager.wait_until_finished()
        self._manager.close()
