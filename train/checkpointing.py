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
from typing import Any

import grain
import jax
import orbax.checkpoint as ocp
from etils import epath
from flax import nnx

from model.gpt import GPT

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
            raise ValueError(f"{directory} holds no loader position (process_0-of-N.json); the checkpoint is incomplete")
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
    """Every `every` steps, keeping the last `keep`; the data position travels with the weights,
    so a restored run reads exactly the batches the uninterrupted one would have."""

    def __init__(self, workdir: str, *, every: int, keep: int):
        self.directory = os.path.join(os.path.abspath(workdir), CHECKPOINT_DIR)
        self._manager = ocp.CheckpointManager(
            self.directory,
            item_names=("state", "data", "feed"),
            options=ocp.CheckpointManagerOptions(max_to_keep=keep, save_interval_steps=every),
        )

    def latest_step(self) -> int | None:
        return self._manager.latest_step()

    def should_save(self, step: int) -> bool:
        return self._manager.should_save(step)

    def save(
        self, step: int, model: GPT, optimizer: nnx.Optimizer, iterator: grain.DatasetIterator, feed: dict, *,
        force: bool = False,
    ) -> bool:
        items = {
            "state": ocp.args.StandardSave({"model": nnx.state(model), "optimizer": nnx.state(optimizer)}),
            "data": _PositionSave(iterator),
            "feed": ocp.args.JsonSave(feed),
        }
        return self._manager.save(step, args=ocp.args.Composite(**items), force=force)

    def restore(
        self, step: int, model: GPT, optimizer: nnx.Optimizer, iterator: grain.DatasetIterator, *, data: dict[str, str]
    ) -> dict:
        """Restores in place, onto the shardings the freshly built model and optimizer already have;
        returns the saved feed. Refuses a checkpoint of other `data` (source name -> manifest digest):
        its position would index another stream of records."""
        feed = self._manager.restore(step, args=ocp.args.Composite(feed=ocp.args.JsonRestore()))["feed"]
        for name, digest in data.items():
            if feed["data"].get(name) != digest:
                raise ValueError(
                    f"source {name!r} is not the data the checkpoint at step {step} was trained on: its manifest "
                    f"changed (prepared again, or another directory); resume on the same data, or use another --workdir"
                )
        items = {
            "state": ocp.args.StandardRestore({"model": nnx.state(model), "optimizer": nnx.state(optimizer)}),
            "data": _PositionRestore(iterator),
        }
        restored = self._manager.restore(step, args=ocp.args.Composite(**items))
        nnx.update(model, restored["state"]["model"])
        nnx.update(optimizer, restored["state"]["optimizer"])
        return feed

    def restore_model(self, step: int, model: GPT) -> None:
        """The model's weights alone: the optimizer state is neither built nor read."""
        target = {"model": nnx.state(model)}
        args = ocp.args.PyTreeRestore(
            item=target, restore_args=ocp.checkpoint_utils.construct_restore_args(target), partial_restore=True
        )
        restored = self._manager.restore(step, args=ocp.args.Composite(state=args))
        nnx.update(model, restored["state"]["model"])

    def close(self) -> None:
        self._manager.wait_until_finished()
        self._manager.close()
