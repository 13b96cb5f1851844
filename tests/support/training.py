"""The small training run the trainer's tests start from: a one-layer model of width 32 on 32-token
sequences, 8 steps of 4 rows, checkpoints and evaluation every 4 steps."""

from __future__ import annotations

import dataclasses

from model.config import preset
from train.config import TrainConfig


def small_config(data: str, workdir: str, **overrides) -> TrainConfig:
    """The small run on `data` in `workdir`, with `overrides` (any `TrainConfig` field) over it."""
    model = preset("tiny", width=32, mlp_width=64, num_layers=1, num_heads=2, max_seq_len=32)
    base = TrainConfig(
        data=data,
        workdir=workdir,
        model=model,
        steps=8,
        batch_size=4,
        seq_len=32,
        warmup_steps=2,
        learning_rate=3e-3,
        checkpoint_every=4,
        eval_every=4,
        eval_batches=1,
    )
    return dataclasses.replace(base, **overrides)
