"""The training loop: loader batches in, checkpoints, metrics, evals and a loss curve out."""

from __future__ import annotations

import dataclasses
import hashlib

import grain
import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from model.attention import CUDNN, choose, platform
from model.config import DATA
from model.gpt import GPT
from pipeline.load import (
    SOURCE_TOKENS,
    DataSource,
    LoaderConfig,
    make_dataset,
    open_sources,
)
from schemas.errors import SettingError
from schemas.manifest import Manifest
from train.checkpointing import Checkpointer
from train.config import TrainConfig, check_resume, load_saved, write_config
from train.host_batches import FedBatches
from train.mesh import HostShards, global_batch, host_shards, make_mesh, one_row_per_device
from train.metrics import Display, MetricsLog, TensorBoardLog, plot_losses
from train.processes import agreed, check_same_everywhere
from train.profiling import StepProfile
from train.readings import Readings
from train.run_tokenizer import RunTokenizer, check_run_tokenizer, write_run_tokenizer
from train.step import Steps, healthy, make_optimizer
from train.stopping import (
    Diverged,
    Preempted,
    check_interrupted,
    preemption_noticed,
    preemption_requested,
)


def build_model(config: TrainConfig, mesh: jax.sharding.Mesh) -> GPT:
    """The model, each parameter created directly with its annotated sharding."""
    with jax.set_mesh(mesh):
        return GPT(config.model, rngs=nnx.Rngs(config.seed))


def build(config: TrainConfig, mesh: jax.sharding.Mesh) -> tuple[GPT, nnx.Optimizer]:
    model = build_model(config, mesh)
    with jax.set_mesh(mesh):
        return model, make_optimizer(model, config)


def host_data(
    config: TrainConfig,
    split: str,
    shards: HostShards,
    *,
    workers: int,
    sources: tuple[DataSource, ...] | None = None,
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


def eval_totals(
    steps: Steps,
    arrays: list[jax.Array],
    data: grain.IterDataset,
    batches: int,
    mesh: jax.sharding.Mesh,
) -> tuple[jax.Array, jax.Array]:
    """Summed loss and real-token count over the first `batches` validation batches (the same
    batches every time), still on the device; their ratio is the token-weighted mean loss."""
    iterator = iter(data)
    loss_sum, tokens = jnp.zeros(()), jnp.zeros(())
    for _ in range(batches):
        host_batch = next(iterator)
        host_batch.pop(SOURCE_TOKENS, None)
        batch_sum, batch_tokens = steps.eval(arrays, global_batch(host_batch, mesh))
        loss_sum, tokens = loss_sum + batch_sum, tokens + batch_tokens
    return loss_sum, tokens


def evaluate(
    steps: Steps,
    arrays: list[jax.Array],
    eval_sets: dict[str, grain.IterDataset],
    batches: int,
    mesh: jax.sharding.Mesh,
) -> dict[str, float]:
    """`eval_loss` over every source's validation batches, token-weighted, and with several sources
    `eval_loss/NAME` for each; one read from the device at the end."""
    totals = jax.device_get(
        {name: eval_totals(steps, arrays, data, batches, mesh) for name, data in eval_sets.items()}
    )
    row = {
        "eval_loss": sum(float(s) for s, _ in totals.values())
        / max(sum(float(n) for _, n in totals.values()), 1.0)
    }
    if len(totals) > 1:
        row.update(
            {f"eval_loss/{name}": float(s) / max(float(n), 1.0) for name, (s, n) in totals.items()}
        )
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
    return {
        s.name: hashlib.sha256(m.to_json().encode()).hexdigest()
        for s, m in zip(config.data, manifests)
    }


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
    tokenizer = RunTokenizer.of(manifests[0], config.data[0].path)
    if tokenizer.info.n_vocab > config.model.vocab_size:
        raise SettingError(
            "vocab_size",
            config.model.vocab_size,
            f"must hold the data's vocabulary of {tokenizer.info.n_vocab} ids; leave it out to "
            "take the data's",
        )
    saved = load_saved(config.workdir)
    if saved is not None:
        check_resume(saved, config)
    check_run_tokenizer(config.workdir, tokenizer)
    mesh = make_mesh(config.mesh)
    shard_rows = config.batch_size // mesh.shape[DATA]
    if shard_rows % config.gradient_accumulation_steps:
        raise SettingError(
            "gradient_accumulation_steps",
            config.gradient_accumulation_steps,
            f"must divide the {shard_rows} rows of each data shard ({{batch_size}} over a data "
            f"axis of {mesh.shape[DATA]})",
            batch_size=config.batch_size,
        )
    shards = host_shards(mesh)
    # Validation data is opened now, so a split that cannot work fails here, not at the first eval.
    eval_sets = {
        source.name: host_data(config, "validation", shards, workers=0, sources=(source,))
        for source, manifest in zip(config.data, manifests)
        if "validation" in manifest.totals and config.eval_batches
    }
    iterator = iter(host_data(config, "train", shards, workers=config.loader_workers))
    return _Opened(data_identity(config, manifests), tokenizer, mesh, shards, iterator, eval_sets)


def host_reads():
    """Where the loop reads values from the device (the rest of it runs under a guard refusing
    that)."""
    return jax.transfer_guard_device_to_host("allow")


def _attention_note(config: TrainConfig) -> str:
    """Which attention kernel the step runs, and why: said once, so that a run that misses cuDNN
    (float32 compute, an odd head size) says so."""
    model = config.model
    implementation, why = choose(
        platform(),
        dtype=model.compute_dtype,
        head_dim=model.width // model.num_heads,
        seq_len=config.seq_len,
        segments=config.packing != "concat",
    )
    return (
        f"attention through {why}" if implementation == CUDNN else f"attention through XLA: {why}"
    )


def _no_validation_note(config: TrainConfig, eval_sets: dict) -> str | None:
    """What a run without validation data for some source should say once (nothing when
    `--eval-batches 0` turned evaluation off)."""
    missing = [name for name in config.source_names if name not in eval_sets]
    if not config.eval_batches or not missing:
        return None
    if not eval_sets:
        return (
            "the data has no validation split (prepare --validation-fraction makes one): no "
            "evaluation"
        )
    return (
        f"no validation split in {', '.join(missing)}: eval_loss covers {', '.join(eval_sets)} "
        "alone"
    )


def _finished(
    config: TrainConfig, mesh: jax.sharding.Mesh, checkpointer: Checkpointer, step: int
) -> dict:
    """A run already at or past `config.steps`: nothing is trained or written; its latest weights
    are read for their digest alone."""
    model = build_model(config, mesh)
    with jax.set_mesh(mesh):
        checkpointer.restore_model(step, model)
    return dict(
        step=step,
        already=True,
        checkpoint_dir=checkpointer.directory,
        params_sha256=params_digest(model),
        process_index=jax.process_index(),
    )


def train(config: TrainConfig) -> dict:
    """Trains up to `config.steps`, resuming from the workdir's latest checkpoint if there is one;
    a run already there changes nothing (the result says `already`).

    A refusal on any process (a changed setting, unreadable data, a mesh that does not fit) ends
    every process with the same error. A run stops early with `Diverged` at a step whose loss or
    gradient norm is not finite, with `CheckpointError` when a checkpoint cannot be written, with
    `Preempted` after saving the step it reached when SIGTERM came (`train.stopping`), and with
    KeyboardInterrupt at the step a Ctrl-C came.
    """
    opened = agreed(lambda: _open(config))
    check_same_everywhere(config.to_json(), "settings")
    mesh, iterator, eval_sets = opened.mesh, opened.iterator, opened.eval_sets
    primary = jax.process_index() == 0
    checkpointer = Checkpointer(
        config.workdir, every=config.checkpoint_every, keep=config.keep_checkpoints
    )
    start = checkpointer.latest_step() or 0
    if start >= config.steps:
        iterator.close()
        try:
            return _finished(config, mesh, checkpointer, start)
        finally:
            checkpointer.close()
    checkpointer.probe()
    if primary:
        write_config(config)
        write_run_tokenizer(config.workdir, opened.tokenizer)
    steps = Steps(
        *build(config, mesh), micro_batches=config.gradient_accumulation_steps, remat=config.remat
    )
    arrays = steps.arrays
    names = config.source_names
    tokens_before = np.zeros(len(names), np.int64)  # per source, fed before this (re)start
    if start:
        state, feed = checkpointer.restore(start, steps.state(arrays), iterator, data=opened.data)
        arrays = steps.flat(state)
        tokens_before = np.array([feed["source_tokens"][name] for name in names], np.int64)
    shards = opened.shards
    fed = FedBatches(
        shards, num_sources=len(names), rows=config.batch_size // shards.count * len(shards.indices)
    )
    readings = Readings(config, tokens_before, start)
    log = MetricsLog(config.workdir, start) if primary else None
    board = TensorBoardLog(config.workdir, start) if primary and config.tensorboard else None
    display = Display(start=start, total=config.steps, names=names, primary=primary)
    profile = StepProfile(
        config.workdir,
        start=start,
        skip=config.profile_skip_steps,
        steps=config.profile_steps,
        last_step=config.steps,
    )
    resumed = f"resuming from the checkpoint of step {start} of {config.steps}" if start else None
    for note in (resumed, _attention_note(config), _no_validation_note(config, eval_sets)):
        if note:
            display.note(note)
    key = jax.random.key(config.seed)
    health = healthy()
    last, evals, waited_noted, failing, stopped = {"step": start}, {}, False, True, None
    try:
        check_interrupted()
        if preemption_noticed():  # before any step: nothing new to save
            raise Preempted(saved=None, latest=start)
        # Nothing in the loop may wait for the device but the reads marked `host_reads`: a step that
        # neither logs, checkpoints nor evaluates only feeds the device.
        with jax.set_mesh(mesh), jax.transfer_guard_device_to_host("disallow_explicit"):
            for step in range(start + 1, config.steps + 1):
                check_interrupted()
                checkpointer.check()
                # Then this step is the last: saved, then the run ends.
                stopping = preemption_requested(step)
                logged = step % config.log_every == 0 or step == config.steps
                saving = checkpointer.due(step, last=config.steps) or stopping
                evaluating = bool(eval_sets) and (
                    step % config.eval_every == 0 or step == config.steps
                )
                with profile.around(step):
                    host_batch = next(iterator)
                    fed.add(host_batch, host_batch.pop(SOURCE_TOKENS, None), rows=logged)
                    reports = one_row_per_device(fed.report().view("<u4"), mesh)
                    arrays, metrics = steps.train(
                        arrays, global_batch(host_batch, mesh), key, np.int32(step), reports, health
                    )
                    health = metrics["health"]
                    with host_reads():
                        rows = readings.read(through=step - 1)  # now that this step is queued
                        if (
                            logged or saving or step == start + 1
                        ):  # the first step checks the processes agree early
                            readings.add(step, logged, metrics)
                        if saving or evaluating:
                            rows += readings.read(through=step)
                        if evaluating and not readings.diverged:
                            evals = evaluate(steps, arrays, eval_sets, config.eval_batches, mesh)
                            readings.restart_clock(step)
                        if saving and not readings.diverged:
                            feed = {
                                "data": opened.data,
                                "source_tokens": dict(zip(names, map(int, readings.source_tokens))),
                            }
                            waited = checkpointer.save(step, steps.state(arrays), iterator, feed)
                profile.after(step, arrays)
                for last in rows:
                    display.row(last)
                    for out in (log, board):
                        if out:
                            out.write(last)
                if readings.diverged:
                    raise Diverged(*readings.diverged, last_checkpoint=checkpointer.saved or start)
                if evaluating:
                    display.evals(step, evals)
                    for out in (log, board):
                        if out:
                            out.write({"step": step, **evals})
                if saving and waited > 1.0 and not waited_noted:
                    display.note(
                        f"the checkpoint of step {step} waited {waited:.1f} s for the one before "
                        "it to be written; checkpoints further apart would not"
                    )
                    waited_noted = True
                display.step()
                if stopping and step < config.steps:
                    stopped = step
                    break
        failing = False
    finally:
        profile.stop()
        # A save in flight is written whole, whatever ended the loop.
        checkpointer.close(failing=failing)
        iterator.close()
        display.close()
        if board:
            board.close()
    if stopped:
        raise Preempted(saved=stopped, latest=stopped)
    model = steps.nodes(arrays)["model"]
    result = dict(
        last,
        **evals,
        checkpoint_dir=checkpointer.directory,
        params_sha256=params_digest(model),
        process_index=jax.process_index(),
    )
    if profile.path:
        result["profile"] = profile.path
    if board:
        result["tensorboard"] = board.directory
    if log:
        log.close()
        result["plot"] = plot_losses(config.workdir)
    return result
