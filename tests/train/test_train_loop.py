"""The loop keeps the device fed: steps that neither log, evaluate nor checkpoint read nothing from
it, the logged learning rate is computed on the host, and checkpoints are written in the background
without a kill mid-save ever leaving one that restores wrongly."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import numpy as np
import optax
import pytest
from jax._src import array as jax_array
from jax._src import config as jax_config

import train.trainer as trainer
from support.runs import REPO
from support.training import small_config
from train.checkpointing import Checkpointer
from train.metrics import METRICS_NAME, read_rows
from train.step import learning_rate
from train.trainer import train

pytestmark = pytest.mark.integration  # every test here runs a command, a process or training


@pytest.mark.parametrize(
    "warmup, steps, decay", [(0, 50, None), (10, 50, None), (10, 50, 30), (1, 7, None)]
)
def test_the_host_learning_rate_is_optax_warmup_cosine_schedule(warmup, steps, decay):
    config = small_config(
        "-",
        "-",
        warmup_steps=warmup,
        steps=steps,
        decay_steps=decay,
        learning_rate=6e-4,
        min_learning_rate=6e-5,
    )
    schedule = optax.warmup_cosine_decay_schedule(
        0.0, 6e-4, warmup, config.decay_horizon, end_value=6e-5
    )
    counts = np.arange(steps + 20)  # past the horizon too
    np.testing.assert_allclose(
        [learning_rate(config, int(n)) for n in counts], schedule(counts), rtol=1e-5, atol=1e-12
    )


@pytest.fixture
def guard_on_cpu(monkeypatch):
    """On CPU a jax.Array is host memory already and JAX's transfer guard never fires: make every
    read of one's value (np.asarray, float, jax.device_get) obey the guard as a copy off an
    accelerator does."""
    real = jax_array.ArrayImpl._value

    def guarded(self):
        if jax_config.transfer_guard_device_to_host.value in ("disallow", "disallow_explicit"):
            raise RuntimeError("Disallowed device-to-host transfer (read of a device value)")
        return real.fget(self)

    monkeypatch.setattr(jax_array.ArrayImpl, "_value", property(guarded))


def test_a_step_that_neither_logs_nor_checkpoints_reads_nothing_from_the_device(
    stories_dataset, tmp_path, monkeypatch, guard_on_cpu
):
    # Quiet steps (1 is checked, 3 and 6 logged, 4 evaluated and checkpointed, 7 the last) around
    # them.
    result = train(small_config(stories_dataset, str(tmp_path / "run"), steps=7, log_every=3))
    assert result["step"] == 7
    rows = read_rows(os.path.join(str(tmp_path / "run"), METRICS_NAME))
    assert [r["step"] for r in rows if "loss" in r] == [3, 6, 7]

    # The guard holds: a read slipped into the part of a step that feeds the device is refused.
    real = trainer.global_batch

    def reading(host_batch, mesh):
        batch = real(host_batch, mesh)
        float(batch["inputs"][0, 0])
        return batch

    monkeypatch.setattr(trainer, "global_batch", reading)
    with pytest.raises(RuntimeError, match="Disallowed device-to-host transfer"):
        train(small_config(stories_dataset, str(tmp_path / "other"), steps=7, log_every=3))


# A run whose save of `step` stops, at `phase`, until the process is killed: "writing" while the
# arrays are being written (the loader position is saved alongside them), "committing" once all is
# written and before the rename that publishes the checkpoint.
_PAUSED_SAVE = """
import asyncio, os, sys, time
sys.path.insert(0, ".")
data, workdir, phase, step = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
marker = os.path.join(workdir, "paused")

def pause(path):
    if os.path.basename(str(path)).split(".")[0] == step:
        open(marker, "w").close()
        time.sleep(3600)

if phase == "writing":
    from train import checkpointing
    real = checkpointing._AnyTopologyHandler.save
    def save(self, directory, *args, **kwargs):
        pause(os.path.dirname(str(directory)))
        return real(self, directory, *args, **kwargs)
    checkpointing._AnyTopologyHandler.save = save
else:
    from orbax.checkpoint._src.path import atomicity
    real = atomicity.AtomicRenameTemporaryPath.finalize
    async def finalize(self, *args, **kwargs):
        pause(self._final_path)
        return await real(self, *args, **kwargs)
    atomicity.AtomicRenameTemporaryPath.finalize = finalize

from model.config import preset
from train.config import TrainConfig
from train.trainer import train
model = preset("tiny", width=32, mlp_width=64, num_layers=1, num_heads=2, max_seq_len=32)
train(TrainConfig(data=data, workdir=workdir, model=model, steps=8, batch_size=4, seq_len=32,
                  warmup_steps=2, learning_rate=3e-3, checkpoint_every=4, eval_every=4,
                  eval_batches=1))
"""


def _losses(workdir: str) -> list[float]:
    return [r["loss"] for r in read_rows(os.path.join(workdir, METRICS_NAME)) if "loss" in r]


@pytest.mark.slow
@pytest.mark.parametrize("phase", ["writing", "committing"])
def test_a_kill_during_a_save_leaves_the_previous_checkpoint_and_the_resume_is_exact(
    stories_dataset, tmp_path, phase
):
    whole = str(tmp_path / "whole")
    uninterrupted = train(small_config(stories_dataset, whole))
    workdir = str(tmp_path / "killed")
    os.makedirs(workdir)
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    process = subprocess.Popen(
        [sys.executable, "-c", _PAUSED_SAVE, stories_dataset, workdir, phase, "8"],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 300
        while not os.path.exists(os.path.join(workdir, "paused")):
            assert process.poll() is None, process.communicate()[1].decode()[-3000:]
            assert time.monotonic() < deadline, "the save of step 8 never started"
            time.sleep(0.05)
        process.send_signal(signal.SIGKILL)
    finally:
        process.kill()
        process.wait()
    checkpoints = os.listdir(os.path.join(workdir, "checkpoints"))
    assert "8" not in checkpoints and any(name.startswith("8.") for name in checkpoints), (
        checkpoints
    )  # left unfinished
    checkpointer = Checkpointer(workdir, every=4, keep=3)
    assert checkpointer.latest_step() == 4
    checkpointer.close()
    resumed = train(small_config(stories_dataset, workdir))
    np.testing.assert_allclose(_losses(workdir), _losses(whole), rtol=1e-6)
    assert resumed["params_sha256"] == uninterrupted["params_sha256"]
