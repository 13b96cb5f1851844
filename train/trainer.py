"""The training loop: loader batches in, checkpoints, metrics, evals and a loss curve out."""

from __future__ import annotations

import dataclasses
import hashlib
import sys
import time

import grain
import jax
import numpy as np
from flax import nnx
from tqdm import tqdm

from model.gpt import GPT
from pipeline.load import (
    SOURCE_TOKENS,
    DataSource,
    LoaderConfig,
    make_dataset,
    open_sources,
)
from schemas.manifest import Manifest
from train.checkpointing import Checkpointer
from train.config import TrainConfig, check_resume, load_saved, write_config
from train.host_batches import FedBatches
from train.mesh import HostShards, global_batch, host_shards, make_mesh
from train.metrics import MetricsLog, PlainProgress, peak_flops, plot_losses
from train.processes import agreed, check_same_everywhere
from train.run_tokenizer import RunTokenizer, check_run_tokenizer, write_run_tokenizer
from train.step import eval_step, learning_rate_schedule, make_optimizer, train_step


def build_model(config: TrainConfig, mesh: jax.sharding.Mesh) -> GPT:
    """The model, each parameter created directly with its annotated sharding."""
    with jax.set_mesh(mesh):
        return GPT(config.model, rngs=nnx.Rngs(config.seed))


def build(config: TrainConfig, mesh: jax.sharding.Mesh) -> tuple[GPT, nnx.Optimizer]:
    model = build_model(config, mesh)
    with jax.set_mesh(mesh):
        return model, make_optimizer(model, config)


def host_data(
    config: TrainConfig, split: str, shards: HostShards, *, workers: int, sources: tuple[DataSource, ...] | None = None
) -> grain.IterDataset:
    """This process's rows of the global batches of `sources` (default: the run's data)."""
    index, count = shards.rows
    return make_dataset(
        LoaderConfig(
            sources or config.data,
            split=split,
            seq_len=config.seq_len,
            global_batch_size=config.batch_size,
            seed=config.seed,
            packing=config.packing,
            worker_count=workers,
            shard_index=index,
            shard_count=count,
        )
    )


def eval_totals(model: GPT, data: grain.IterDataset, batches: int, mesh: jax.sharding.Mesh) -> tuple[float, float]:
    """Summed loss and real-token count over the first `batches` validation batches (the same
    batches every time); their ratio is the token-weighted mean loss."""
    iterator = iter(data)
    loss_sum, tokens = 0.0, 0.0
    for _ in range(batches):
        host_batch = next(iterator)
        host_batch.pop(SOURCE_TOKENS, None)
        batch_sum, batch_tokens = eval_step(model, global_batch(host_batch, mesh))
        loss_sum, tokens = loss_sum + float(batch_sum), tokens + float(batch_tokens)
    return loss_sum, tokens


def evaluate(
    model: GPT, eval_sets: dict[str, grain.IterDataset], batches: int, mesh: jax.sharding.Mesh
) -> dict[str, float]:
    """`eval_loss` over every source's validation batches, token-weighted, and with several sources
    `eval_loss/NAME` for each."""
    totals = {name: eval_totals(model, data, batches, mesh) for name, data in eval_sets.items()}
    row = {"eval_loss": sum(s for s, _ in totals.values()) / max(sum(n for _, n in totals.values()), 1.0)}
    if len(totals) > 1:
        row.update({f"eval_loss/{name}": s / max(n, 1.0) for name, (s, n) in totals.items()})
    return row


def params_digest(model: GPT) -> str:
    """SHA-256 of every parameter, gathered whole: equal on all processes of a consistent run."""
    from jax.experimental import multihost_utils

    h = hashlib.sha256()
    for leaf in jax.tree.leaves(nnx.state(model, nnx.Param)):
        h.update(np.asarray(multihost_utils.process_allgather(leaf, tiled=True)).tobytes())
    return h.hexdigest()


def data_identity(config: TrainConfig, manifests: tuple[Manifest, ...]) -> dict[str, str]:
    """Each source's name -> SHA-256 of its manifest (which holds every shard's hash): what the
    loader's saved position is a position in."""
    return {s.name: hashlib.sha256(m.to_json().encode()).hexdigest() for s, m in zip(config.data, manifests)}


@dataclasses.dataclass(frozen=True)
class _Opened:
    data: dict[str, str]
    tokenizer: RunTokenizer
    mesh: jax.sharding.Mesh
    shards: HostShards
    iterator: grain.DatasetIterator
    eval_sets: dict[str, grain.IterDataset]


def _open(config: TrainConfig) -> _Opened:
    """Everything that can refuse the run, before anything is written; runs on every process."""
    manifests = open_sources(config.data)
    tokenizer = RunTokenizer.of(manifests[0])
    if tokenizer.info.n_vocab > config.model.vocab_size:
        raise ValueError(
            f"the data's vocabulary ({tokenizer.info.n_vocab}) is larger than the model's ({config.model.vocab_size}); "
            "drop --vocab-size (the data's is the default) or give at least the data's"
        )
    saved = load_saved(config.workdir)
    if saved is not None:
        check_resume(saved, config)
    check_run_tokenizer(config.workdir, tokenizer)
    mesh = make_mesh(config.mesh)
    shards = host_shards(mesh)
    # Validation data is opened now, so a split that cannot work fails here, not at the first eval.
    eval_sets = {
        source.name: host_data(config, "validation", shards, workers=0, sources=(source,))
        for source, manifest in zip(config.data, manifests)
        if "validation" in manifest.totals and config.eval_batches
    }
    iterator = iter(host_data(config, "train", shards, workers=config.loader_workers))
    return _Opened(data_identity(config, manifests), tokenizer, mesh, shards, iterator, eval_sets)


def _mixture_log(names: tuple[str, ...], tokens: np.ndarray) -> tuple[dict[str, float], str]:
    """The realized mixture so far: metrics (`source_share/NAME`) and a short text for the progress bar."""
    shares = tokens / max(int(tokens.sum()), 1)
    return (
        {f"source_share/{name}": float(share) for name, share in zip(names, shares)},
        " ".join(f"{name} {share:.2f}" for name, share in zip(names, shares)),
    )


def train(config: TrainConfig) -> dict:
    """Trains up to `config.steps`, resuming from the workdir's latest checkpoint if there is one.

    A refusal on any process (a changed setting, unreadable data, a mesh that does not fit) ends
    every process with the same error.
    """
    opened = agreed(lambda: _open(config))
    check_same_everywhere(config.to_json(), "settings")
    mesh, iterator, eval_sets = opened.mesh, opened.iterator, opened.eval_sets
    primary = jax.process_index() == 0
    if primary:
        write_config(config)
        write_run_tokenizer(config.workdir, opened.tokenizer)
    model, optimizer = build(config, mesh)
    checkpointer = Checkpointer(config.workdir, every=config.checkpoint_every, keep=config.keep_checkpoints)
    names = config.source_names
    mixture = len(names) > 1
    start = checkpointer.latest_step() or 0
    tokens_before = np.zeros(len(names), np.int64)  # per source, fed before this (re)start
    if start:
        feed = checkpointer.restore(start, model, optimizer, iterator, data=opened.data)
        tokens_before = np.array([feed["source_tokens"][name] for name in names], np.int64)
    fed = FedBatches(opened.shards, num_sources=len(names))
    source_tokens = tokens_before
    log = MetricsLog(config.workdir, start) if primary else None
    schedule = learning_rate_schedule(config)
    key = jax.random.key(config.seed)
    tokens_per_step = config.batch_size * config.seq_len
    peak = peak_flops(jax.devices()[0].device_kind)
    flops_per_token = config.model.flops_per_token(config.seq_len)
    last = {"step": start}
    clock, clock_step = time.perf_counter(), start
    terminal = sys.stderr.isatty()
    plain = PlainProgress(start=start, total=config.steps) if primary and not terminal else None
    with jax.set_mesh(mesh), tqdm(
        initial=start, total=config.steps, disable=not (primary and terminal), unit="step", dynamic_ncols=True
    ) as bar:
        for step in range(start + 1, config.steps + 1):
            host_batch = next(iterator)
            batch_source_tokens = host_batch.pop(SOURCE_TOKENS, None)
            fed.add(host_batch, batch_source_tokens)
            logged = step % config.log_every == 0 or step == config.steps
            saving = checkpointer.should_save(step) or step == config.steps
            if step == start + 1 or logged or saving:
                # Before the step computes on, or a checkpoint keeps, a batch the processes disagree on.
                fed_tokens, digest = fed.reconcile(step)
                source_tokens = tokens_before + fed_tokens
            metrics = train_step(model, optimizer, global_batch(host_batch, mesh), jax.random.fold_in(key, step))
            if logged:
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
                    "batch_sha256": digest,
                }
                if peak:
                    last["mfu"] = flops_per_token * tokens_per_s / (peak * jax.device_count())
                postfix = {"loss": f"{loss:.3f}", "tok_s": f"{tokens_per_s:,.0f}"}
                if mixture:
                    shares, postfix["mix"] = _mixture_log(names, source_tokens)
                    last.update(shares)
                if log:
                    log.write(last)
                bar.set_postfix(postfix)
                if plain:
                    plain.set_postfix(postfix)
            if eval_sets and (step % config.eval_every == 0 or step == config.steps):
                evals = evaluate(model, eval_sets, config.eval_batches, mesh)
                last.update(evals)
                if log:
                    log.write({"step": step, **evals})
                clock = time.perf_counter()  # evaluation time is not training throughput
            feed = {"data": opened.data, "source_tokens": dict(zip(names, map(int, source_tokens)))}
            checkpointer.save(step, model, optimizer, iterator, feed, force=step == config.steps)
            bar.update(1)
            if plain:
                plain.step(step)
    checkpointer.close()
    iterator.close()
    result = dict(last, checkpoint_dir=checkpointer.directory, params_sha256=params_digest(model),
                  process_index=jax.process_index())
    if log:
        log.close()
        result["plot"] = plot_losses(config.workdir)
    return result
