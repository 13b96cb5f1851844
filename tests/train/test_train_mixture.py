"""Training on a mixture: per-source eval losses, and the realized token shares in the log."""

from __future__ import annotations

import dataclasses
import os

import numpy as np
import pytest

from model.config import preset
from support.synthetic import write_prepared
from train.config import TrainConfig
from train.metrics import METRICS_NAME, read_rows
from train.trainer import train

pytestmark = pytest.mark.integration  # every test here runs a command, a process or training

WEIGHTS = {"web": 0.75, "stories": 0.25}


def _source(path: str, ids: tuple[int, int], seed: int) -> str:
    """A prepared directory whose tokens all lie in `ids`: its rows are told apart from the
    other's."""
    rng = np.random.default_rng(seed)

    def documents(n: int) -> list[np.ndarray]:
        return [rng.integers(*ids, int(rng.integers(10, 80))) for _ in range(n)]

    write_prepared(
        path, {"train": documents(400), "validation": documents(40)}, n_vocab=512, record_tokens=64
    )
    return path


@pytest.fixture(scope="module")
def spec(tmp_path_factory) -> str:
    root = tmp_path_factory.mktemp("sources")
    web = _source(str(root / "web"), (2, 100), seed=1)
    stories = _source(str(root / "stories"), (300, 310), seed=2)  # few ids: easy to predict
    return f"web={WEIGHTS['web']}:{web},stories={WEIGHTS['stories']}:{stories}"


def _config(spec: str, workdir: str, **overrides) -> TrainConfig:
    model = preset(
        "tiny", vocab_size=512, width=32, mlp_width=64, num_layers=1, num_heads=2, max_seq_len=32
    )
    base = TrainConfig(
        data=spec,
        workdir=workdir,
        model=model,
        steps=12,
        batch_size=8,
        seq_len=32,
        warmup_steps=2,
        learning_rate=3e-3,
        checkpoint_every=6,
        eval_every=6,
        eval_batches=2,
    )
    return dataclasses.replace(base, **overrides)


def test_a_mixture_logs_per_source_eval_losses_and_realized_shares(spec, tmp_path):
    workdir = str(tmp_path / "run")
    result = train(_config(spec, workdir))
    rows = read_rows(os.path.join(workdir, METRICS_NAME))
    evals = [r for r in rows if "eval_loss" in r]
    assert [r["step"] for r in evals] == [6, 12]
    for r in evals:
        per_source = [r["eval_loss/web"], r["eval_loss/stories"]]
        assert min(per_source) < r["eval_loss"] < max(per_source)  # token-weighted over both
    # Ten ids are easier to learn than a hundred.
    assert evals[-1]["eval_loss/stories"] < evals[-1]["eval_loss/web"]
    steps = [r for r in rows if "loss" in r]
    assert len(steps) == 12
    assert all(
        r["source_share/web"] + r["source_share/stories"] == pytest.approx(1.0) for r in steps
    )
    # Cumulative over 12 x 8 x 32 target tokens; the mixture interleaves whole records of up to 64
    # tokens.
    for name, weight in WEIGHTS.items():
        assert result[f"source_share/{name}"] == pytest.approx(weight, abs=0.05)


def test_a_resumed_mixture_counts_from_where_it_stopped(spec, tmp_path):
    whole = str(tmp_path / "whole")
    train(_config(spec, whole))
    split = str(tmp_path / "split")
    train(_config(spec, split, steps=6, decay_steps=12))
    train(_config(spec, split, decay_steps=12))
    shares = [
        [r.get(f"source_share/{n}") for n in WEIGHTS]
        for r in read_rows(os.path.join(whole, METRICS_NAME))
    ]
    resumed = [
        [r.get(f"source_share/{n}") for n in WEIGHTS]
        for r in read_rows(os.path.join(split, METRICS_NAME))
    ]
    assert resumed == shares
