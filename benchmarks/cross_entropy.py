"""Whether a fused, chunked cross-entropy pays in the train step: the trainer's loss (the whole \
batch's
float32 logits, then optax's cross entropy) against the candidate below, in alternating rounds of \
one
run, with the compiled step's temporary memory as XLA reports it.

The candidate never holds more than one chunk of positions' logits: a scan over chunks of the
sequence (the batch axis stays whole, so data parallelism shards it as before) computes each
chunk's logits, loss and, right away, their gradient with respect to the features and the tied
embedding (softmax minus one-hot, through the logits' own VJP), so nothing of the logits is kept
for the backward pass and nothing is recomputed.

    python benchmarks/cross_entropy.py [--preset minigpt] [--batch-size 8] [--chunks 4] [--rounds 6]
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import train.step as step_module  # noqa: E402
from model.config import preset  # noqa: E402
from train.config import TrainConfig  # noqa: E402
from train.mesh import global_batch, make_mesh  # noqa: E402
from train.trainer import build  # noqa: E402


def _logits(x, embedding):
    """The tied output layer, as `nnx.Embed.attend` computes it: in the features' dtype, then
    float32."""
    return jnp.dot(x, embedding.astype(x.dtype).T).astype(jnp.float32)


@functools.partial(jax.custom_vjp, nondiff_argnums=(3,))
def fused_loss_sum(features, embedding, targets, chunks):
    """Summed next-token cross entropy of `features` (B, T, D) against `targets` (B, T)."""
    return _fused_forward(features, embedding, targets, chunks)[0]


def _fused_forward(features, embedding, targets, chunks):
    b, t, d = features.shape

    def by_chunk(x):  # (B, T, ...) -> (chunks, B, T / chunks, ...)
        return jnp.swapaxes(x.reshape(b, chunks, t // chunks, *x.shape[2:]), 0, 1)

    def chunk(carry, inputs):
        total, d_embedding = carry
        x, y = inputs
        logits, vjp = jax.vjp(_logits, x, embedding)
        lse = jax.nn.logsumexp(logits, axis=-1)
        total = total + (lse - jnp.take_along_axis(logits, y[..., None], axis=-1)[..., 0]).sum()
        d_logits = jnp.exp(logits - lse[..., None]) - jax.nn.one_hot(
            y, logits.shape[-1], dtype=logits.dtype
        )
        dx, de = vjp(d_logits)
        return (total, d_embedding + de), dx

    init = (jnp.zeros((), jnp.float32), jnp.zeros_like(embedding))
    (total, d_embedding), dx = jax.lax.scan(chunk, init, (by_chunk(features), by_chunk(targets)))
    return total, (jnp.swapaxes(dx, 0, 1).reshape(b, t, d), d_embedding)


def _fused_backward(chunks, residuals, g):
    dx, d_embedding = residuals
    return (g * dx).astype(dx.dtype), (g * d_embedding).astype(d_embedding.dtype), None


fused_loss_sum.defvjp(_fused_forward, _fused_backward)


def fused_loss(model, batch, rngs=None, *, chunks: int):
    """The mean loss over a concat batch (every token real), through `fused_loss_sum`."""
    features = model.features(batch["inputs"], rngs=rngs)
    total = fused_loss_sum(features, model.wte.embedding[...], batch["targets"], chunks)
    return total / batch["targets"].size


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--preset", default="minigpt")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--chunks", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--steps-per-round", type=int, default=3)
    args = parser.parse_args()
    model_config = preset(args.preset)
    seq_len = model_config.max_seq_len
    config = TrainConfig(
        data="-", workdir="-", model=model_config, seq_len=seq_len, batch_size=args.batch_size
    )
    mesh = make_mesh(())
    tokens = np.random.default_rng(0).integers(
        0, model_config.vocab_size, (args.batch_size, seq_len + 1)
    )
    host = {"inputs": tokens[:, :-1].astype(np.int32), "targets": tokens[:, 1:].astype(np.int32)}
    trainers_loss = step_module.loss_fn
    variants = {
        "whole-batch logits (the trainer's)": trainers_loss,
        f"fused, {args.chunks} chunks": functools.partial(fused_loss, chunks=args.chunks),
    }
    runs = {}
    with jax.set_mesh(mesh):
        batch = global_batch(host, mesh)
        for name, loss in variants.items():
            step_module.loss_fn = loss  # what the step traces, compiled below
            steps = step_module.Steps(*build(config, mesh))
            compiled = steps.train.lower(
                steps.arrays, batch, jax.random.key(0), np.int32(1)
            ).compile()
            arrays, metrics = steps.train(steps.arrays, batch, jax.random.key(0), np.int32(1))
            runs[name] = {
                "steps": steps,
                "arrays": arrays,
                "loss": float(metrics["loss"]),
                "times": [],
                "memory": compiled.memory_analysis().temp_size_in_bytes,
            }
        step_module.loss_fn = trainers_loss
        for _ in range(args.rounds):
            for run in runs.values():
                began = time.perf_counter()
                for _ in range(args.steps_per_round):
                    run["arrays"], metrics = run["steps"].train(
                        run["arrays"], batch, jax.random.key(0), np.int32(1)
                    )
                jax.block_until_ready(metrics)
                run["times"].append((time.perf_counter() - began) / args.steps_per_round)
    reference = runs[next(iter(runs))]
    print(
        f"{jax.devices()[0].device_kind}; {args.preset} preset, batch {args.batch_size} x "
        f"{seq_len}, vocabulary {model_config.padded_vocab_size}; median of {args.rounds} rounds "
        f"of {args.steps_per_round} steps"
    )
    print(f"{'loss':36} {'first loss':>11} {'ms/step':>9} {'vs trainer':>11} {'temp memory':>12}")
    for name, run in runs.items():
        ratio = statistics.median(a / b for a, b in zip(run["times"], reference["times"]))
        print(
            f"{name:36} {run['loss']:>11.5f} {statistics.median(run['times']) * 1e3:>9.0f} "
            f"{ratio:>11.3f} {run['memory'] / 2**20:>9.0f} MiB"
        )


if __name__ == "__main__":
    main()
