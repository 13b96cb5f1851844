"""Orbax checkpoints of model, optimizer (its step included) and the loader's position."""

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
            item_names=("state", "data"),
            options=ocp.CheckpointManagerOptions(max_to_keep=keep, save_interval_steps=every),
        )

    def latest_step(self) -> int | None:
        return self._manager.latest_step()

    def save(
        self, step: int, model: GPT, optimizer: nnx.Optimizer, iterator: grain.DatasetIterator | None, *, force: bool = False
    ) -> bool:
        items = {"state": ocp.args.StandardSave({"model": nnx.state(model), "optimizer": nnx.state(optimizer)})}
        if iterator is not None:
            items["data"] = grain.checkpoint.CheckpointSave(iterator)
        return self._manager.save(step, args=ocp.args.Composite(**items), force=force)

    def restore(
        self, step: int, model: GPT, optimizer: nnx.Optimizer | None, iterator: grain.DatasetIterator | None
    ) -> None:
        """Restores in place, onto the shardings the freshly built model and optimizer already have."""
        target = {"model": nnx.state(model)}
        if optimizer is not None:
            target["optimizer"] = nnx.state(optimizer)
        items = {"state": ocp.args.StandardRestore(target)}
        if iterator is not None:
            items["data"] = grain.checkpoint.CheckpointRestore(iterator)
        restored = self._manager.restore(step, args=ocp.args.Composite(**items))
        nnx.update(model, restored["state"]["model"])
        if optimizer is not None:
            nnx.update(optimizer, restored["state"]["optimizer"])

    def close(self) -> None:
        self._manager.wait_until_finished()
        self._manager.close()
