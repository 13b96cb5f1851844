"""Eval loss is the mean over real tokens, however the padding is spread over batches."""

from __future__ import annotations

import grain
import jax
import numpy as np
import optax
import pytest

from model.config import GPTConfig
from train.config import TrainConfig
from train.mesh import make_mesh
from train.step import Steps
from train.trainer import build, eval_totals

pytestmark = pytest.mark.integration  # every test here runs a command, a process or training

SMALL = GPTConfig(vocab_size=512, max_seq_len=16, num_layers=1, num_heads=2, width=32, mlp_width=64)


def _packed_batch(rng: np.random.Generator, real: list[int]) -> dict[str, np.ndarray]:
    """Rows like document packing's: the first `real[i]` tokens of row i are one document, the rest
    padding."""
    tokens = rng.integers(0, SMALL.vocab_size, (len(real), 17)).astype(np.int32)
    segments = (np.arange(16)[None] < np.array(real)[:, None]).astype(np.int32)
    return {
        "inputs": tokens[:, :-1],
        "targets": tokens[:, 1:],
        "segment_ids": segments,
        "positions": np.tile(np.arange(16, dtype=np.int32), (len(real), 1)) * segments,
    }


def test_eval_loss_weights_every_real_token_alike():
    config = TrainConfig(data="-", workdir="-", model=SMALL, seq_len=16, batch_size=2)
    mesh = make_mesh(())
    model, optimizer = build(config, mesh)
    steps = Steps(model, optimizer)
    rng = np.random.default_rng(0)
    batches = [_packed_batch(rng, [16, 16]), _packed_batch(rng, [3, 1])]  # 32 real tokens, then 4
    with jax.set_mesh(mesh):
        loss_sum, tokens = eval_totals(
            steps, steps.arrays, grain.MapDataset.source(batches).to_iter_dataset(), 2, mesh
        )
        # The reference: every real token's loss, straight from the logits, pooled over both
        # batches.
        token_losses, batch_means = [], []
        for b in batches:
            logits = model(b["inputs"], segment_ids=b["segment_ids"], positions=b["positions"])
            losses = np.asarray(
                optax.softmax_cross_entropy_with_integer_labels(logits, b["targets"])
            )
            real = losses[b["segment_ids"] > 0]
            token_losses.extend(real)
            batch_means.append(real.mean())
    assert float(tokens) == 36
    assert float(loss_sum) / float(tokens) == pytest.approx(np.mean(token_losses), rel=1e-5)
    # What averaging the batches' means would give is measurably different here.
    assert abs(np.mean(batch_means) - np.mean(token_losses)) > 1e-3
