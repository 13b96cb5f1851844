"""Orbax checkpoints of model, optimizer (its step included), the loader's position and what the
position means: the number of data shards it is for and, for a mixture, the target tokens each
source has given so far."""

from __future__ import annotations

import os

import grain
import orbax.checkpoint as ocp
from flax import nnx

from model.gpt import GPT

CHECKPOINT_DIR = "checkpoints"


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
            "data": grain.checkpoint.CheckpointSave(iterator),
            "feed": ocp.args.JsonSave(feed),
        }
        return self._manager.save(step, args=ocp.args.Composite(**items), force=force)

    def restore(
        self, step: int, model: GPT, optimizer: nnx.Optimizer, iterator: grain.DatasetIterator, *, data_shards: int
    ) -> dict:
        """Restores in place, onto the shardings the freshly built model and optimizer already have;
        returns the saved feed. The loader's position is per data shard: it restores only onto a mesh
        whose data axis has as many."""
        feed = self._manager.restore(step, args=ocp.args.Composite(feed=ocp.args.JsonRestore()))["feed"]
        if feed["data_shards"] != data_shards:
            raise ValueError(
                f"the checkpoint at step {step} holds the loader's position for a data axis of {feed['data_shards']}, "
                f"and this mesh's has {data_shards}; resume with a --mesh whose data axis is {feed['data_shards']}"
            )
        items = {
            "state": ocp.args.StandardRestore({"model": nnx.state(model), "optimizer": nnx.state(optimizer)}),
            "data": grain.checkpoint.CheckpointRestore(iterator),
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
