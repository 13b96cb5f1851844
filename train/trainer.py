"""The training loop: loader batches in, checkpoints, metrics, evals and a loss curve out."""

from __future__ import annotations

import hashlib
import time

import grain
import jax
import numpy as np
from flax import nnx
from tqdm import tqdm

from model.gpt import GPT
from pipeline.load.loader import LoaderConfig, make_dataset, make_iterator, open_prepared
from train.checkpointing import Checkpointer
from train.config import TrainConfig, save_or_check
from train.mesh import global_batch, make_mesh
from train.metrics import MetricsLog, peak_flops, plot_losses
from train.step import eval_step, learning_rate_schedule, make_optimizer, train_step


def build(config: TrainConfig, mesh: jax.sharding.Mesh) -> tuple[GPT, nnx.Optimizer]:
    """Model and optimizer, each parameter created directly with its annotated sharding."""
    with jax.set_mesh(mesh):
        model = GPT(config.model, rngs=nnx.Rngs(config.seed))
        optimizer = make_optimizer(model, config)
    return model, optimizer


def _loader(config: TrainConfig, split: str, *, workers: int) -> LoaderConfig:
    return LoaderConfig(
        config.data_dir,
        split=split,
        seq_len=config.seq_len,
        global_batch_size=config.batch_size,
        seed=config.seed,
        packing=config.packing,
        worker_count=workers,
    )


def evaluate(model: GPT, data: grain.IterDataset, batches: int, mesh: jax.sharding.Mesh) -> float:
    """Mean loss over the first `batches` validation batches: the same batches every time."""
    iterator = iter(data)
    return float(np.mean([float(eval_step(model, global_batch(next(iterator), mesh))) for _ in range(batches)]))


def params_digest(model: GPT) -> str:
    """SHA-256 of every parameter, gathered whole: equal on all processes of a consistent run."""
    from jax.experimental import multihost_utils

    h = hashlib.sha256()
    for leaf in jax.tree.leaves(nnx.state(model, nnx.Param)):
        h.update(np.asarray(multihost_utils.process_allgather(leaf, tiled=True)).tobytes())
    return h.hexdigest()


def train(config: TrainConfig) -> dict:
    """Trains up to `config.steps`, resuming from the workdir's latest checkpoint if there is one."""
    manifest = open_prepared(config.data_dir)
    if manifest.tokenizer.n_vocab > config.model.vocab_size:
        raise ValueError(
            f"the data's vocabulary ({manifest.tokenizer.n_vocab}) is larger than the model's "
            f"({config.model.vocab_size})"
        )
    primary = jax.process_index() == 0
    if primary:
        save_or_check(config)
    mesh = make_mesh(config.mesh)
    model, optimizer = build(config, mesh)
    iterator = make_iterator(_loader(config, "train", workers=config.loader_workers))
    checkpointer = Checkpointer(config.workdir, every=config.checkpoint_every, keep=config.keep_checkpoints)
    start = checkpointer.latest_step() or 0
    if start:
        checkpointer.restore(start, model, optimizer, iterator)
    # Built up front, so a validation split that cannot work fails now, not at the first eval.
    eval_data = (
        make_dataset(_loader(config, "validation", workers=0)) if "validation" in manifest.totals else None
    )
    log = MetricsLog(config.workdir, start) if primary else None
    schedule = learning_rate_schedule(config)
    key = jax.random.key(config.seed)
    tokens_per_step = config.batch_size * config.seq_len
    peak = peak_flops(jax.devices()[0].device_kind)
    flops_per_token = config.model.flops_per_token(config.seq_len)
    last = {"step": start}
    clock, clock_step = time.perf_counter(), start
    with jax.set_mesh(mesh), tqdm(
        initial=start, total=config.steps, disable=not primary, unit="step", dynamic_ncols=True
    ) as bar:
        for step in range(start + 1, config.steps + 1):
            batch = global_batch(next(iterator), mesh)
            metrics = train_step(model, optimizer, batch, jax.random.fold_in(key, step))
            if step % config.log_every == 0 or step == config.steps:
                loss = float(metrics["loss"])  # waits for the step: the timing below is real
                now = time.perf_counter()
                tokens_per_s = tokens_per_step * (step - clock_step) / (now - clock)
                clock, clock_step = now, step
                last = {
                    "step": step,
                    "loss": loss,
                    "lr": float(schedule(step - 1)),
                    "grad_norm": float(metrics["grad_norm"]),
                    "tokens_per_s": tokens_per_s,
                }
                if peak:
                    last["mfu"] = flops_per_token * tokens_per_s / (peak * jax.device_count())
                if log:
                    log.write(last)
                bar.set_postfix(loss=f"{loss:.3f}", tok_s=f"{tokens_per_s:,.0f}")
            if eval_data is not None and (step % config.eval_every == 0 or step == config.steps):
                eval_loss = evaluate(model, eval_data, config.eval_batches, mesh)
                last["eval_loss"] = eval_loss
                if log:
                    log.write({"step": step, "eval_loss": eval_loss})
                clock = time.perf_counter()  # evaluation time is not training throughput
            checkpointer.save(step, model, optimizer, iterator, force=step == config.steps)
            bar.update(1)
    checkpointer.close()
    iterator.close()
    result = dict(last, checkpoint_dir=checkpointer.directory, params_sha256=params_digest(model),
                  process_index=jax.process_index())
    if log:
        log.close()
        result["plot"] = plot_losses(config.workdir)
    return result
