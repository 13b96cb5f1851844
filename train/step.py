"""The optimizer, the loss and the jitted train and eval steps."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from model.gpt import GPT
from train.config import TrainConfig


def learning_rate(config: TrainConfig, count, xp=np):
    """The learning rate of the update after `count` updates: linear warmup from 0 to the peak, then
    cosine decay to the minimum at the horizon, then flat (optax's `warmup_cosine_decay_schedule`).

    One formula for both sides: the optimizer evaluates it with `xp=jax.numpy` inside the step, the
    logs with numpy on the host, so reading the rate never waits for the device.
    """
    peak, floor, warmup = config.learning_rate, config.min_learning_rate, config.warmup_steps
    decay = config.decay_horizon - warmup
    progress = xp.clip(count - warmup, 0, decay) / decay
    decayed = floor + (peak - floor) * 0.5 * (1 + xp.cos(np.pi * progress))
    return xp.where(count < warmup, peak * count / max(warmup, 1), decayed)


def _decay_mask(params: nnx.State) -> nnx.State:
    """Weight decay on matrices only, not on biases or LayerNorm parameters (GPT-2 practice)."""
    return jax.tree.map(lambda p: p.ndim >= 2, params)


def make_optimizer(model: GPT, config: TrainConfig) -> nnx.Optimizer:
    tx = optax.chain(
        optax.clip_by_global_norm(config.grad_clip),
        optax.adamw(
            functools.partial(learning_rate, config, xp=jnp),
            b1=0.9,
            b2=config.beta2,
            weight_decay=config.weight_decay,
            mask=_decay_mask,
        ),
    )
    return nnx.Optimizer(model, tx, wrt=nnx.Param)


def token_losses(
    model: GPT, batch: dict[str, jax.Array], rngs: nnx.Rngs | None = None
) -> tuple[jax.Array, jax.Array]:
    """Next-token cross entropy at every position, and its weight: 1 for real tokens, 0 for padding
    (segment id 0)."""
    logits = model(
        batch["inputs"],
        segment_ids=batch.get("segment_ids"),
        positions=batch.get("positions"),
        rngs=rngs,
    )
    losses = optax.softmax_cross_entropy_with_integer_labels(logits, batch["targets"])
    if "segment_ids" in batch:
        return losses, (batch["segment_ids"] > 0).astype(jnp.float32)
    return losses, jnp.ones_like(losses)


def loss_fn(model: GPT, batch: dict[str, jax.Array], rngs: nnx.Rngs | None = None) -> jax.Array:
    """Mean next-token cross entropy over real tokens."""
    losses, weights = token_losses(model, batch, rngs)
    return (losses * weights).sum() / jnp.maximum(weights.sum(), 1.0)


class Steps:
    """The jitted train and eval steps of one model and optimizer.

    Both are split once into a static graph, closed over by the steps, and their arrays, which
    travel as one flat list: a call flattens a list, not the module graph and its Variables, and the
    old arrays are donated to the new ones. `state` turns a list back into the named state
    (`{"model": ..., "optimizer": ...}`) that checkpoints hold.
    """

    def __init__(self, model: GPT, optimizer: nnx.Optimizer):
        self._graphdef, state = nnx.split({"model": model, "optimizer": optimizer})
        self.arrays, self._treedef = jax.tree.flatten(state)
        self.train = jax.jit(self._train, donate_argnums=0)
        self.eval = jax.jit(self._eval)

    def state(self, arrays: list[jax.Array]) -> nnx.State:
        return jax.tree.unflatten(self._treedef, arrays)

    def flat(self, state: nnx.State) -> list[jax.Array]:
        return self._treedef.flatten_up_to(state)

    def nodes(self, arrays: list[jax.Array]) -> dict:
        """Model and optimizer holding `arrays`."""
        return nnx.merge(self._graphdef, self.state(arrays))

    def _train(
        self,
        arrays: list[jax.Array],
        batch: dict[str, jax.Array],
        key: jax.Array,
        step: jax.Array,
        reports: jax.Array | None = None,
    ) -> tuple[list[jax.Array], dict[str, jax.Array]]:
        """One AdamW step on a global batch: the new arrays and the step's metrics.

        Dropout draws from `key` folded with `step`, so a resumed run draws the same masks.
        `reports` (one row per device, sharded over all of them) come back replicated in the
        metrics: what the processes tell each other about their batches travels with the step, with
        no collective and no wait of its own.
        """
        nodes = self.nodes(arrays)
        model, optimizer = nodes["model"], nodes["optimizer"]
        rngs = nnx.Rngs(dropout=jax.random.fold_in(key, step)) if model.config.dropout > 0 else None
        loss, grads = nnx.value_and_grad(loss_fn)(model, batch, rngs)
        optimizer.update(model, grads)
        metrics = {"loss": loss, "grad_norm": optax.tree.norm(grads)}
        if reports is not None:
            metrics["reports"] = jax.lax.with_sharding_constraint(
                reports, jax.sharding.PartitionSpec()
            )
        return self.flat(nnx.state(nodes)), metrics

    def _eval(
        self, arrays: list[jax.Array], batch: dict[str, jax.Array]
    ) -> tuple[jax.Array, jax.Array]:
        """The summed loss over a batch's real tokens and their count: batches add up
        token-weighted, however much padding each holds."""
        losses, weights = token_losses(self.nodes(arrays)["model"], batch)
        return (losses * weights).sum(), weights.sum()
