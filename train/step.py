"""The optimizer, the loss and the jitted train and eval steps."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from model.gpt import GPT
from train.config import TrainConfig


def learning_rate_schedule(config: TrainConfig) -> optax.Schedule:
    """Linear warmup to the peak, then cosine decay to the minimum at the horizon (then flat)."""
    return optax.warmup_cosine_decay_schedule(
        init_value=0.0,
        peak_value=config.learning_rate,
        warmup_steps=config.warmup_steps,
        decay_steps=config.decay_horizon,
        end_value=config.min_learning_rate,
    )


def _decay_mask(params: nnx.State) -> nnx.State:
    """Weight decay on matrices only, not on biases or LayerNorm parameters (GPT-2 practice)."""
    return jax.tree.map(lambda p: p.ndim >= 2, params)


def make_optimizer(model: GPT, config: TrainConfig) -> nnx.Optimizer:
    tx = optax.chain(
        optax.clip_by_global_norm(config.grad_clip),
        optax.adamw(
            learning_rate_schedule(config), b1=0.9, b2=config.beta2, weight_decay=config.weight_decay,
            mask=_decay_mask,
        ),
    )
    return nnx.Optimizer(model, tx, wrt=nnx.Param)


def _token_losses(
    model: GPT, batch: dict[str, jax.Array], rngs: nnx.Rngs | None = None
) -> tuple[jax.Array, jax.Array]:
    """Next-token cross entropy at every position, and its weight: 1 for real tokens, 0 for padding
    (segment id 0)."""
    logits = model(
        batch["inputs"], segment_ids=batch.get("segment_ids"), positions=batch.get("positions"), rngs=rngs
    )
    losses = optax.softmax_cross_entropy_with_integer_labels(logits, batch["targets"])
    if "segment_ids" in batch:
        return losses, (batch["segment_ids"] > 0).astype(jnp.float32)
    return losses, jnp.ones_like(losses)


def loss_fn(model: GPT, batch: dict[str, jax.Array], rngs: nnx.Rngs | None = None) -> jax.Array:
    """Mean next-token cross entropy over real tokens."""
    losses, weights = _token_losses(model, batch, rngs)
    return (losses * weights).sum() / jnp.maximum(weights.sum(), 1.0)


@nnx.jit
def train_step(
    model: GPT, optimizer: nnx.Optimizer, batch: dict[str, jax.Array], dropout_key: jax.Array
) -> dict[str, jax.Array]:
    """One AdamW step on a global batch; `dropout_key` is derived from the seed and the step."""
    rngs = nnx.Rngs(dropout=dropout_key) if model.config.dropout > 0 else None
    loss, grads = nnx.value_and_grad(loss_fn)(model, batch, rngs)
    optimizer.update(model, grads)
    return {"loss": loss, "grad_norm": optax.tree.norm(grads)}


@nnx.jit
def eval_step(model: GPT, batch: dict[str, jax.Array]) -> tuple[jax.Array, jax.Array]:
    """The summed loss over a batch's real tokens and their count: batches add up token-weighted,
    however much padding each holds."""
    losses, weights = _token_losses(model, batch)
    return (losses * weights).sum(), weights.sum()
