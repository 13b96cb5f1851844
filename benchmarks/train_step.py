"""Steady-state train step of our trainer against the JAX AI Stack miniGPT tutorial's, in one run.

The reference is a faithful reimplementation of the training step from the tutorial "Train a
miniGPT language model with JAX": post-LayerNorm blocks with `nnx.MultiHeadAttention` and a causal
mask, ReLU feed-forward, an untied output layer, `optax.adam(1e-3)`, and an `nnx.jit` step with
`nnx.value_and_grad(has_aux=True)` and an `nnx.MultiMetric` update. Sizes are the tutorial's:
sequence 256, width 256, 8 heads, feed-forward 256, 4 blocks, the GPT-2 vocabulary. Ours is the
`minigpt` preset (the same sizes in our GPT-2 architecture) through the trainer's step
(`train.step.Steps`), with AdamW, clipping and the schedule. Both run the same batches, \
interleaved in rounds, so machine
noise hits both alike.

    python benchmarks/train_step.py [--batch-size 8] [--rounds 5] [--steps-per-round 5]
    python benchmarks/train_step.py --real-batches [--batch-size 8] [--rounds 5] \
[--steps-per-round 20]

`--real-batches` measures whether the loader stalls the step: our minigpt step fed the loader's
batches (document packing, a two-source mixture, 2 prefetch workers, on synthetic prepared data)
against the same step fed one constant batch, in alternating rounds of the same run. Real rounds
pay everything the loader costs the training process: receiving the workers' batches, the host
to device copy of every batch, and the CPU the workers take from the step. The goal is a ratio
within 5%.

The gpt2 preset's MFU against nanoGPT's PyTorch step on a GPU: benchmarks/gpu_step.py.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.join(REPO, "tests"))  # `synthetic`: prepared sources from token ids

from model.config import preset  # noqa: E402
from train.config import TrainConfig  # noqa: E402
from train.mesh import global_batch, make_mesh  # noqa: E402
from train.step import Steps  # noqa: E402
from train.trainer import build  # noqa: E402

VOCAB = 50257
MAXLEN, EMBED, HEADS, FFN, BLOCKS = 256, 256, 8, 256, 4


class TransformerBlock(nnx.Module):
    def __init__(
        self, embed_dim: int, num_heads: int, ff_dim: int, *, rngs: nnx.Rngs, rate: float = 0.1
    ):
        self.mha = nnx.MultiHeadAttention(
            num_heads=num_heads, in_features=embed_dim, decode=False, rngs=rngs
        )
        self.dropout1 = nnx.Dropout(rate=rate)
        self.layer_norm1 = nnx.LayerNorm(epsilon=1e-6, num_features=embed_dim, rngs=rngs)
        self.linear1 = nnx.Linear(in_features=embed_dim, out_features=ff_dim, rngs=rngs)
        self.linear2 = nnx.Linear(in_features=ff_dim, out_features=embed_dim, rngs=rngs)
        self.dropout2 = nnx.Dropout(rate=rate)
        self.layer_norm2 = nnx.LayerNorm(epsilon=1e-6, num_features=embed_dim, rngs=rngs)

    def __call__(self, inputs: jax.Array, training: bool = False) -> jax.Array:
        seq_len = inputs.shape[1]
        mask = jnp.tril(jnp.ones((seq_len, seq_len)))
        attention_output = self.mha(inputs_q=inputs, mask=mask, decode=False)
        attention_output = self.dropout1(attention_output, deterministic=not training)
        out1 = self.layer_norm1(inputs + attention_output)
        ffn_output = self.linear2(nnx.relu(self.linear1(out1)))
        ffn_output = self.dropout2(ffn_output, deterministic=not training)
        return self.layer_norm2(out1 + ffn_output)


class TokenAndPositionEmbedding(nnx.Module):
    def __init__(self, maxlen: int, vocab_size: int, embed_dim: int, *, rngs: nnx.Rngs):
        self.token_emb = nnx.Embed(num_embeddings=vocab_size, features=embed_dim, rngs=rngs)
        self.pos_emb = nnx.Embed(num_embeddings=maxlen, features=embed_dim, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        positions = jnp.arange(0, x.shape[1])[None, :]
        return self.token_emb(x) + self.pos_emb(positions)


class MiniGPT(nnx.Module):
    def __init__(self, *, rngs: nnx.Rngs):
        self.embedding_layer = TokenAndPositionEmbedding(MAXLEN, VOCAB, EMBED, rngs=rngs)
        self.transformer_blocks = nnx.List(
            [TransformerBlock(EMBED, HEADS, FFN, rngs=rngs) for _ in range(BLOCKS)]
        )
        self.output_layer = nnx.Linear(in_features=EMBED, out_features=VOCAB, rngs=rngs)

    def __call__(self, inputs: jax.Array, training: bool = False) -> jax.Array:
        x = self.embedding_layer(inputs)
        for block in self.transformer_blocks:
            x = block(x, training=training)
        return self.output_layer(x)


def reference_loss_fn(model: MiniGPT, batch: tuple[jax.Array, jax.Array]):
    logits = model(batch[0])
    loss = optax.softmax_cross_entropy_with_integer_labels(logits=logits, labels=batch[1]).mean()
    return loss, logits


@nnx.jit
def reference_train_step(model: MiniGPT, optimizer: nnx.Optimizer, metrics: nnx.MultiMetric, batch):
    grad_fn = nnx.value_and_grad(reference_loss_fn, has_aux=True)
    (loss, logits), grads = grad_fn(model, batch)
    metrics.update(loss=loss, logits=logits, labels=batch[1])
    optimizer.update(model, grads)


def _timed(step, steps: int, results: list[float]) -> None:
    """Appends the mean seconds per step over `steps` steps, waiting for the last to finish."""
    start = time.perf_counter()
    out = None
    for _ in range(steps):
        out = step()
    jax.block_until_ready(out)
    results.append((time.perf_counter() - start) / steps)


def compare(batch_size: int, rounds: int, steps_per_round: int) -> None:
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, VOCAB, (batch_size, MAXLEN + 1)).astype(np.int32)
    mesh = make_mesh(())

    with jax.set_mesh(mesh):
        reference = MiniGPT(rngs=nnx.Rngs(0))
    ref_optimizer = nnx.Optimizer(reference, optax.adam(1e-3), wrt=nnx.Param)
    ref_metrics = nnx.MultiMetric(loss=nnx.metrics.Average("loss"))
    ref_batch = (jnp.asarray(tokens[:, :-1]), jnp.asarray(tokens[:, 1:]))

    config = TrainConfig(
        data="-", workdir="-", model=preset("minigpt"), seq_len=MAXLEN, batch_size=batch_size
    )
    steps = Steps(*build(config, mesh))
    arrays = steps.arrays
    key = jax.random.key(0)

    def ref_step():
        reference_train_step(reference, ref_optimizer, ref_metrics, ref_batch)
        return ref_metrics.compute()["loss"]

    with jax.set_mesh(mesh):
        ours_batch = global_batch({"inputs": tokens[:, :-1], "targets": tokens[:, 1:]}, mesh)

        def our_step():
            nonlocal arrays
            arrays, metrics = steps.train(arrays, ours_batch, key, np.int32(1))
            return metrics["loss"]

        for step in (ref_step, our_step):  # compile and warm up
            jax.block_until_ready(step())
            jax.block_until_ready(step())
        ref_times: list[float] = []
        our_times: list[float] = []
        for _ in range(rounds):
            _timed(ref_step, steps_per_round, ref_times)
            _timed(our_step, steps_per_round, our_times)

    tokens_per_step = batch_size * MAXLEN
    ref_s, our_s = statistics.median(ref_times), statistics.median(our_times)
    print(
        f"{jax.devices()[0].device_kind} x{jax.device_count()}, batch {batch_size} x {MAXLEN} "
        f"tokens, median of {rounds} rounds of {steps_per_round} steps"
    )
    print(f"{'step':34} {'ms/step':>9} {'tokens/s':>12}")
    print(
        f"{'miniGPT tutorial (reference)':34} {ref_s * 1e3:>9.1f} {tokens_per_step / ref_s:>12,.0f}"
    )
    print(f"{'ours (minigpt preset)':34} {our_s * 1e3:>9.1f} {tokens_per_step / our_s:>12,.0f}")
    print(f"speed ours / reference: {ref_s / our_s:.2f}")


def _mixture(tmp: str, tokens: int) -> tuple:
    """Two synthetic prepared sources (~200- and ~5k-token documents), as a 0.7 / 0.3 mixture."""
    from pipeline.load.data_spec import DataSource
    from support.synthetic import write_prepared

    sources = []
    for k, (name, mean, weight) in enumerate((("short", 200, 0.7), ("long", 5000, 0.3))):
        rng = np.random.default_rng(k)
        lengths = np.maximum(1, rng.exponential(mean, tokens // mean + 1).astype(np.int64))
        flat = rng.integers(0, VOCAB - 1, int(lengths.sum()), dtype=np.uint16)
        path = os.path.join(tmp, name)
        write_prepared(
            path,
            {"train": np.split(flat, np.cumsum(lengths)[:-1])},
            n_vocab=VOCAB,
            eot_id=VOCAB - 1,
            record_tokens=8192,
            num_shards=4,
        )
        sources.append(DataSource(name, path, weight))
    return tuple(sources)


REAL_BATCH_GOAL = 1.05


def real_batches(batch_size: int, rounds: int, steps_per_round: int, workers: int = 2) -> float:
    """Steps fed by the loader against steps fed a constant batch (see the module's docstring);
    returns the ratio of their medians."""
    import tempfile

    from pipeline.load import SOURCE_TOKENS, LoaderConfig, make_iterator

    mesh = make_mesh(())
    config = TrainConfig(
        data="-",
        workdir="-",
        model=preset("minigpt"),
        seq_len=MAXLEN,
        batch_size=batch_size,
        packing="document",
    )
    steps = Steps(*build(config, mesh))
    arrays = steps.arrays
    key = jax.random.key(0)
    with tempfile.TemporaryDirectory() as tmp:
        loader = LoaderConfig(
            _mixture(tmp, 3_000_000),
            seq_len=MAXLEN,
            global_batch_size=batch_size,
            packing="document",
            worker_count=workers,
            shard_index=0,
            shard_count=1,
        )
        iterator = make_iterator(loader)

        def host_batch() -> dict:
            batch = next(iterator)
            batch.pop(SOURCE_TOKENS)
            return batch

        with jax.set_mesh(mesh):
            constant = global_batch(host_batch(), mesh)

            def step(batch: dict) -> jax.Array:
                nonlocal arrays
                arrays, metrics = steps.train(arrays, batch, key, np.int32(1))
                return metrics["loss"]

            def real_step():
                return step(global_batch(host_batch(), mesh))

            def constant_step():
                return step(constant)

            for _ in range(steps_per_round):  # compile, start the workers, fill their read-ahead
                jax.block_until_ready(real_step())
            jax.block_until_ready(constant_step())
            real_times: list[float] = []
            constant_times: list[float] = []
            for _ in range(rounds):
                _timed(real_step, steps_per_round, real_times)
                _timed(constant_step, steps_per_round, constant_times)
        iterator.close()
    real_s, constant_s = statistics.median(real_times), statistics.median(constant_times)
    print(
        f"{jax.devices()[0].device_kind} x{jax.device_count()}, {os.cpu_count()} CPUs, minigpt, "
        f"batch {batch_size} x {MAXLEN}, document packing, two-source mixture, {workers} prefetch "
        f"workers, median of {rounds} rounds of {steps_per_round} steps"
    )
    print(f"{'step fed':34} {'ms/step':>9}")
    print(f"{'a constant batch':34} {constant_s * 1e3:>9.1f}")
    print(f"{'the loader':34} {real_s * 1e3:>9.1f}")
    print(f"real / constant: {real_s / constant_s:.3f} (goal: at most {REAL_BATCH_GOAL})")
    return real_s / constant_s


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--batch-size", type=int, default=None)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--steps-per-round", type=int, default=None, help="default: 5, or 20 with --real-batches"
    )
    parser.add_argument(
        "--real-batches", action="store_true", help="the step fed the loader vs a constant batch"
    )
    parser.add_argument(
        "--check", action="store_true", help="with --real-batches: exit 1 above the goal"
    )
    args = parser.parse_args()
    if args.real_batches:
        ratio = real_batches(args.batch_size or 8, args.rounds, args.steps_per_round or 20)
        if args.check and ratio > REAL_BATCH_GOAL:
            sys.exit(1)
    else:
        compare(args.batch_size or 8, args.rounds, args.steps_per_round or 5)


if __name__ == "__main__":
    main()
