"""The optimizer, the loss and the jitted train and eval steps, with their micro-batches."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from model.config import DATA
from model.gpt import GPT
from schemas.errors import SettingError
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
    model: GPT, batch: dict[str, jax.Array], rngs: nnx.Rngs | None = None, remat: str = "none"
) -> tuple[jax.Array, jax.Array]:
    """Next-token cross entropy at every position, and its weight: 1 for real tokens, 0 for padding
    (segment id 0)."""
    logits = model(
        batch["inputs"],
        segment_ids=batch.get("segment_ids"),
        positions=batch.get("positions"),
        rngs=rngs,
        remat=remat,
    )
    losses = optax.softmax_cross_entropy_with_integer_labels(logits, batch["targets"])
    if "segment_ids" in batch:
        return losses, (batch["segment_ids"] > 0).astype(jnp.float32)
    return losses, jnp.ones_like(losses)


def loss_fn(model: GPT, batch: dict[str, jax.Array], rngs: nnx.Rngs | None = None) -> jax.Array:
    """Mean next-token cross entropy over real tokens."""
    losses, weights = token_losses(model, batch, rngs)
    return (losses * weights).sum() / jnp.maximum(weights.sum(), 1.0)


def real_tokens(batch: dict[str, jax.Array]) -> jax.Array:
    """How many targets of the batch are real tokens (not document packing's padding)."""
    if "segment_ids" in batch:
        return (batch["segment_ids"] > 0).sum().astype(jnp.float32)
    return jnp.float32(batch["targets"].size)


def micro_batches(batch: dict[str, jax.Array], count: int) -> dict[str, jax.Array]:
    """(count, rows / count, ...): the batch's rows in `count` micro-batches, each as evenly spread
    over the mesh's data axis as the batch.

    Micro-batch i takes the i-th run of rows of every data shard, so no row leaves its device; which
    rows share a micro-batch differs by mesh, but a step sums over all of them.
    """
    mesh = jax.sharding.get_abstract_mesh()
    shards = 1 if mesh.empty else mesh.shape[DATA]

    def split(x: jax.Array) -> jax.Array:
        rows, rest = x.shape[0], x.shape[1:]
        if rows % (shards * count):
            raise SettingError(
                "gradient_accumulation_steps",
                count,
                f"must divide each data shard's {rows // shards} rows",
            )
        y = (
            x.reshape(shards, count, rows // (shards * count), *rest)
            .swapaxes(0, 1)
            .reshape(count, rows // count, *rest)
        )
        return (
            y
            if mesh.empty
            else jax.lax.with_sharding_constraint(y, jax.sharding.PartitionSpec(None, DATA))
        )

    return jax.tree.map(split, batch)


def healthy() -> dict[str, np.ndarray]:
    """The record of the first step whose loss or gradient norm was not finite: none yet (step
    0)."""
    return {"step": np.int32(0), "loss": np.float32(0), "grad_norm": np.float32(0)}


class Steps:
    """The jitted train and eval steps of one model and optimizer.

    Both are split once into a static graph, closed over by the steps, and their arrays, which
    travel as one flat list: a call flattens a list, not the module graph and its Variables, and the
    old arrays are donated to the new ones. `state` turns a list back into the named state
    (`{"model": ..., "optimizer": ...}`) that checkpoints hold.
    """

    def __init__(
        self, model: GPT, optimizer: nnx.Optimizer, *, micro_batches: int = 1, remat: str = "none"
    ):
        self._micro_batches = micro_batches
        self._remat = remat
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
        health: dict[str, jax.Array] | None = None,
    ) -> tuple[list[jax.Array], dict[str, jax.Array]]:
        """One AdamW step on a global batch: the new arrays and the step's metrics.

        Dropout draws from `key` folded with `step`, so a resumed run draws the same masks.
        `reports` (one row per device, sharded over all of them) come back replicated in the
        metrics: what the processes tell each other about their batches travels with the step, with
        no collective and no wait of its own. `health` (`healthy()` at first, then the metrics' own)
        carries the first step whose loss or gradient norm was not finite, for the host to read when
        it next reads.
        """
        nodes = self.nodes(arrays)
        model, optimizer = nodes["model"], nodes["optimizer"]
        key = jax.random.fold_in(key, step) if model.config.dropout > 0 else None
        loss, grads = self._gradients(model, batch, key)
        optimizer.update(model, grads)
        grad_norm = optax.tree.norm(grads)
        health = healthy() if health is None else health
        first = (health["step"] == 0) & ~(jnp.isfinite(loss) & jnp.isfinite(grad_norm))
        now = {"step": jnp.int32(step), "loss": loss, "grad_norm": grad_norm}
        metrics = {
            "loss": loss,
            "grad_norm": grad_norm,
            "health": jax.tree.map(lambda new, old: jnp.where(first, new, old), now, health),
        }
        if reports is not None:
            metrics["reports"] = jax.lax.with_sharding_constraint(
                reports, jax.sharding.PartitionSpec()
            )
        return self.flat(nnx.state(nodes)), metrics

    def _gradients(
        self, model: GPT, batch: dict[str, jax.Array], key: jax.Array | None
    ) -> tuple[jax.Array, nnx.State]:
        """The mean loss over the batch's real tokens and its gradient, one micro-batch at a time.

        Each micro-batch adds its summed loss and the gradient of it; both are divided by the
        batch's real tokens at the end, so the result is the whole batch's mean, whatever the split
        (and with document packing, however the padding falls). Micro-batches run in a `lax.scan`:
        one micro-batch's activations are alive at a time, and the step compiles once whatever their
        number. With dropout, micro-batch i draws from `key` folded with i.
        """
        graphdef, params, rest = nnx.split(model, nnx.Param, ...)
        remat = self._remat

        def summed(
            params: nnx.State, micro: dict[str, jax.Array], micro_key: jax.Array | None
        ) -> jax.Array:
            rngs = None if micro_key is None else nnx.Rngs(dropout=micro_key)
            losses, weights = token_losses(nnx.merge(graphdef, params, rest), micro, rngs, remat)
            return (losses * weights).sum()

        count = self._micro_batches
        if count == 1:
            loss_sum, grads = jax.value_and_grad(summed)(params, batch, key)
        else:

            def add(carry, micro_and_index):
                micro, index = micro_and_index
                micro_key = None if key is None else jax.random.fold_in(key, index)
                loss, grads = jax.value_and_grad(summed)(params, micro, micro_key)
                return (carry[0] + loss, jax.tree.map(jnp.add, carry[1], grads)), None

            zeros = (jnp.zeros((), jnp.float32), jax.tree.map(jnp.zeros_like, params))
            (loss_sum, grads), _ = jax.lax.scan(
                add, zeros, (micro_batches(batch, count), jnp.arange(count))
            )
        tokens = jnp.maximum(real_tokens(batch), 1.0)
        return loss_sum / tokens, jax.tree.map(lambda g: g / tokens, grads)

    def _eval(
        self, arrays: list[jax.Array], batch: dict[str, jax.Array]
    ) -> tuple[jax.Array, jax.Array]:
        """The summed loss over a batch's real tokens and their count: batches add up
        token-weighted, however much padding each holds. In the train step's micro-batches, so that
        evaluation fits in the memory training does."""
        model = self.nodes(arrays)["model"]

        def totals(micro: dict[str, jax.Array]) -> jax.Array:
            losses, weights = token_losses(model, micro)
            return jnp.stack([(losses * weights).sum(), weights.sum()])

        if self._micro_batches == 1:
            loss_sum, tokens = totals(batch)
        else:
            loss_sum, tokens = jax.lax.map(totals, micro_batches(batch, self._micro_batches)).sum(
                axis=0
            )
        return loss_sum, tokens
