"""Gradient accumulation computes the step of the unsplit batch: the same losses, gradient norms and
parameters within float32 rounding, with concat and document packing, on one device and on a
data=4,model=2 mesh; through the trainer, the same metrics and an exact resume."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import jax
import numpy as np
import pytest

from model.config import GPTConfig
from schemas.errors import SettingError
from support.runs import REPO
from support.training import small_config
from train.config import TrainConfig
from train.mesh import global_batch, make_mesh, parse_mesh
from train.metrics import METRICS_NAME, read_rows
from train.step import Steps
from train.trainer import build, train

SMALL = GPTConfig(vocab_size=512, max_seq_len=16, num_layers=2, num_heads=2, width=32, mlp_width=64)
BATCH, SEQ, STEPS = 16, 16, 3


def batches(packing: str) -> list[dict[str, np.ndarray]]:
    """STEPS global batches; with document packing, rows of uneven real lengths (the padding falls
    unevenly over any split into micro-batches)."""
    rng = np.random.default_rng(1)
    out = []
    for _ in range(STEPS):
        tokens = rng.integers(0, SMALL.vocab_size, (BATCH, SEQ + 1)).astype(np.int32)
        batch = {"inputs": tokens[:, :-1], "targets": tokens[:, 1:]}
        if packing == "document":
            real = rng.integers(1, SEQ + 1, BATCH)
            segments = (np.arange(SEQ)[None] < real[:, None]).astype(np.int32)
            batch.update(
                segment_ids=segments, positions=np.arange(SEQ, dtype=np.int32)[None] * segments
            )
        out.append(batch)
    return out


def run_steps(packing: str, accumulation: int, mesh_text: str = "") -> dict[str, list]:
    """Losses and gradient norms of STEPS steps, and every parameter after them."""
    config = TrainConfig(
        data="-",
        workdir="-",
        model=SMALL,
        seq_len=SEQ,
        batch_size=BATCH,
        warmup_steps=0,
        learning_rate=1e-2,
        gradient_accumulation_steps=accumulation,
    )
    mesh = make_mesh(parse_mesh(mesh_text))
    model, optimizer = build(config, mesh)
    steps = Steps(model, optimizer, micro_batches=accumulation)
    arrays, losses, norms = steps.arrays, [], []
    with jax.set_mesh(mesh):
        for step, batch in enumerate(batches(packing), start=1):
            arrays, metrics = steps.train(
                arrays, global_batch(batch, mesh), jax.random.key(0), np.int32(step)
            )
            losses.append(float(metrics["loss"]))
            norms.append(float(metrics["grad_norm"]))
        params = [
            np.asarray(jax.device_get(p)).tolist()
            for p in jax.tree.leaves(steps.nodes(arrays)["model"])
        ]
    return {"losses": losses, "norms": norms, "params": params}


def assert_same_step(a: dict, b: dict) -> None:
    np.testing.assert_allclose(a["losses"], b["losses"], rtol=2e-6)
    np.testing.assert_allclose(a["norms"], b["norms"], rtol=2e-5)
    for x, y in zip(a["params"], b["params"], strict=True):
        # Adam divides each gradient by its own size: where one is near zero, its rounding moves the
        # parameter by a visible part of the learning rate (1e-2), here at most 0.5% of it.
        np.testing.assert_allclose(x, y, rtol=1e-4, atol=5e-5)


@pytest.fixture(scope="module")
def unsplit() -> dict[str, dict]:
    return {packing: run_steps(packing, 1) for packing in ("concat", "document")}


@pytest.mark.integration
@pytest.mark.parametrize("packing", ["concat", "document"])
@pytest.mark.parametrize("accumulation", [4, 16])
def test_micro_batches_compute_the_unsplit_step_on_one_device(unsplit, packing, accumulation):
    assert_same_step(run_steps(packing, accumulation), unsplit[packing])


_ON_A_MESH = """
import json, sys
sys.path[:0] = ["tests/train", "tests", "."]
from test_train_accumulation import run_steps
print(json.dumps({f"{packing} {n}": run_steps(packing, n, "data=4,model=2")
                  for packing in ("concat", "document") for n in (1, 2, 4)}))
"""


@pytest.mark.integration
def test_micro_batches_compute_the_unsplit_step_on_a_data4_model2_mesh(unsplit):
    """Each micro-batch takes rows from every data shard: 16 rows, 4 per shard, 1 or 2 per
    micro-batch."""
    env = dict(
        os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS="--xla_force_host_platform_device_count=8"
    )
    result = subprocess.run(
        [sys.executable, "-c", _ON_A_MESH],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    runs = json.loads(result.stdout.splitlines()[-1])
    for name, run in runs.items():
        assert_same_step(run, unsplit[name.split()[0]])


def _config(data: str, workdir: str, **overrides) -> TrainConfig:
    six_steps = {"steps": 6, "checkpoint_every": 3, "eval_every": 3, "packing": "document"}
    return small_config(data, workdir, **{**six_steps, **overrides})


def _rows(workdir: str) -> list[dict]:
    return read_rows(os.path.join(workdir, METRICS_NAME))


@pytest.mark.integration
def test_the_trainer_with_micro_batches_logs_the_unsplit_run_and_resumes_exactly(
    stories_dataset, tmp_path
):
    whole = train(_config(stories_dataset, str(tmp_path / "whole")))
    split = str(tmp_path / "split")
    train(_config(stories_dataset, split, gradient_accumulation_steps=2, steps=3, decay_steps=6))
    resumed = train(_config(stories_dataset, split, gradient_accumulation_steps=2, decay_steps=6))
    plain, accumulated = _rows(str(tmp_path / "whole")), _rows(split)
    assert [r["step"] for r in accumulated] == [r["step"] for r in plain]
    for a, b in zip(plain, accumulated):
        for name in ("loss", "grad_norm", "eval_loss"):
            if name in a:
                assert b[name] == pytest.approx(a[name], rel=1e-5), (a["step"], name)
        if "loss" in a:  # the same batches, the same tokens
            assert (b["batch_sha256"], b["lr"]) == (a["batch_sha256"], a["lr"])
    uninterrupted = str(tmp_path / "uninterrupted")
    train(_config(stories_dataset, uninterrupted, gradient_accumulation_steps=2))
    assert [r.get("loss") for r in _rows(uninterrupted)] == [r.get("loss") for r in accumulated]
    assert resumed["loss"] == pytest.approx(whole["loss"], rel=1e-5)


def test_micro_batches_must_divide_the_batch(tmp_path):
    with pytest.raises(SettingError) as error:
        _config("-", str(tmp_path / "run"), gradient_accumulation_steps=3)
    assert str(error.value) == (
        "gradient_accumulation_steps must divide batch_size "
        "(got gradient_accumulation_steps=3, batch_size=4)"
    )
