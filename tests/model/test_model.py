"""The model: learning, causality, segment masking, and sharding as annotated."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from model.config import GPTConfig, preset
from model.gpt import GPT
from support.runs import REPO
from train.config import TrainConfig
from train.mesh import global_batch, make_mesh
from train.step import Steps, loss_fn
from train.trainer import build

SMALL = GPTConfig(
    vocab_size=512, max_seq_len=32, num_layers=2, num_heads=4, width=64, mlp_width=128
)


def _model(config: GPTConfig = SMALL) -> tuple[GPT, jax.sharding.Mesh]:
    mesh = make_mesh(())
    with jax.set_mesh(mesh):
        return GPT(config, rngs=nnx.Rngs(0)), mesh


@pytest.mark.integration
def test_steps_decrease_the_loss_on_a_fixed_batch():
    config = TrainConfig(
        data="-",
        workdir="-",
        model=SMALL,
        seq_len=32,
        batch_size=8,
        warmup_steps=0,
        learning_rate=3e-3,
    )
    mesh = make_mesh(())
    steps = Steps(*build(config, mesh))
    arrays = steps.arrays
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, SMALL.vocab_size, (8, 33)).astype(np.int32)
    losses = []
    with jax.set_mesh(mesh):
        batch = global_batch({"inputs": tokens[:, :-1], "targets": tokens[:, 1:]}, mesh)
        for step in range(1, 11):
            arrays, metrics = steps.train(arrays, batch, jax.random.key(0), np.int32(step))
            losses.append(float(metrics["loss"]))
    assert losses[0] == pytest.approx(np.log(SMALL.padded_vocab_size), rel=0.05)
    assert losses[-1] < losses[0] - 1.0
    assert all(b < a for a, b in zip(losses, losses[1:]))


@pytest.mark.integration
def test_future_tokens_do_not_change_past_logits():
    model, mesh = _model()
    with jax.set_mesh(mesh):
        a = jnp.arange(16, dtype=jnp.int32)[None] % SMALL.vocab_size
        b = a.at[0, 10:].set(7)
        la, lb = model(a), model(b)
    np.testing.assert_allclose(la[0, :10], lb[0, :10], atol=1e-5)
    assert not np.allclose(la[0, 10:], lb[0, 10:])


@pytest.mark.integration
def test_segments_do_not_see_each_other():
    model, mesh = _model()
    segments = jnp.array([[1] * 6 + [2] * 10], dtype=jnp.int32)
    positions = jnp.array([list(range(6)) + list(range(10))], dtype=jnp.int32)
    with jax.set_mesh(mesh):
        a = jnp.arange(16, dtype=jnp.int32)[None] + 3
        b = a.at[0, :6].set(99)  # change only the first document
        la = model(a, segment_ids=segments, positions=positions)
        lb = model(b, segment_ids=segments, positions=positions)
        alone = model(a[:, 6:])  # the second document on its own
    np.testing.assert_allclose(la[0, 6:], lb[0, 6:], atol=1e-5)
    np.testing.assert_allclose(la[0, 6:], alone[0], atol=1e-4)


@pytest.mark.integration
def test_padding_is_left_out_of_the_loss():
    model, mesh = _model()
    rng = np.random.default_rng(1)
    tokens = rng.integers(0, SMALL.vocab_size, (2, 16)).astype(np.int32)
    segments = np.ones((2, 16), np.int32)
    segments[:, 12:] = 0
    with jax.set_mesh(mesh):
        full = {
            "inputs": tokens,
            "targets": tokens,
            "segment_ids": segments,
            "positions": np.tile(np.arange(16), (2, 1)),
        }
        changed = dict(full, targets=np.where(segments > 0, tokens, 5))
        assert float(loss_fn(model, full)) == pytest.approx(
            float(loss_fn(model, changed)), abs=1e-6
        )


def test_presets_and_config_checks():
    # GPT-2 small: 124.4M parameters with its 50,257-token vocabulary (here padded to 50,304).
    assert 124.4e6 < preset("gpt2").num_params() < 124.5e6
    with pytest.raises(ValueError, match="divisible"):
        GPTConfig(width=100, num_heads=3)
    with pytest.raises(ValueError, match="preset must be one of"):
        preset("huge")


def _run_on_8_devices(code: str) -> dict:
    env = dict(
        os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=8", JAX_PLATFORMS="cpu"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=600
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


_LOSSES = """
import json, math, sys, jax, numpy as np
sys.path.insert(0, ".")
from jax.sharding import AxisType
from model.config import GPTConfig
from train.config import TrainConfig
from train.mesh import global_batch
from train.step import Steps
from train.trainer import build
cfg = GPTConfig(vocab_size=512, max_seq_len=32, num_layers=2, num_heads=4, width=64, mlp_width=128)
config = TrainConfig(data="-", workdir="-", model=cfg, seq_len=32, batch_size=8, warmup_steps=0)
tokens = np.random.default_rng(0).integers(0, 512, (8, 33)).astype(np.int32)
out = {}
for shape in [(1, 1), (8, 1), (4, 2)]:
    devices = jax.devices()[: math.prod(shape)]
    mesh = jax.make_mesh(shape, ("data", "model"), axis_types=(AxisType.Auto,) * 2, devices=devices)
    steps = Steps(*build(config, mesh))
    arrays = steps.arrays
    out[str(shape)] = []
    with jax.set_mesh(mesh):
        batch = global_batch({"inputs": tokens[:, :-1], "targets": tokens[:, 1:]}, mesh)
        for step in range(1, 5):
            arrays, metrics = steps.train(arrays, batch, jax.random.key(0), np.int32(step))
            out[str(shape)].append(float(metrics["loss"]))
print(json.dumps(out))
"""


@pytest.mark.integration
def test_same_losses_on_one_device_and_on_meshes_of_eight():
    losses = _run_on_8_devices(_LOSSES)
    reference = losses.pop("(1, 1)")
    assert reference[-1] < reference[0]
    assert set(losses) == {"(8, 1)", "(4, 2)"}
    for other in losses.values():
        np.testing.assert_allclose(other, reference, rtol=1e-5)


_SHARDING = """
import json, sys, jax
sys.path.insert(0, ".")
from flax import nnx
from model.config import GPTConfig
from model.gpt import GPT
from train.mesh import make_mesh
out = {}
for fsdp in (False, True):
    cfg = GPTConfig(vocab_size=512, max_seq_len=32, num_layers=1, num_heads=4, width=64,
                    mlp_width=128, fsdp=fsdp)
    mesh = make_mesh((("data", 4), ("model", 2)))
    with jax.set_mesh(mesh):
        model = GPT(cfg, rngs=nnx.Rngs(0))
    block = model.blocks[0]
    arrays = {"qkv": block.attn.qkv.kernel, "out": block.attn.out.kernel, "fc": block.mlp.fc.kernel,
              "wte": model.wte.embedding, "ln": block.ln1.scale}
    out[str(fsdp)] = {k: [list(v[...].shape), list(v[...].addressable_shards[0].data.shape),
                         [str(a) for a in v[...].sharding.spec]] for k, v in arrays.items()}
print(json.dumps(out))
"""


@pytest.mark.integration
def test_parameters_are_sharded_as_annotated():
    result = _run_on_8_devices(_SHARDING)
    tp = result["False"]
    assert tp["qkv"] == [[64, 192], [64, 96], ["None", "model"]]
    assert tp["out"] == [[64, 64], [32, 64], ["model", "None"]]
    assert tp["fc"][1] == [64, 64]
    assert tp["wte"][1] == [256, 64]
    assert tp["ln"][1] == [64]
    fsdp = result["True"]
    assert fsdp["qkv"] == [[64, 192], [16, 96], ["data", "model"]]
    assert fsdp["out"][1] == [32, 16]
    assert fsdp["wte"][1] == [256, 16]


@pytest.mark.integration
@pytest.mark.parametrize("remat", ["full", "dots"])
def test_remat_computes_the_same_loss_and_gradients(remat):
    config = GPTConfig(
        vocab_size=512,
        max_seq_len=32,
        num_layers=2,
        num_heads=4,
        width=64,
        mlp_width=128,
        dropout=0.1,
    )
    model, mesh = _model(config)
    tokens = jnp.asarray(np.random.default_rng(0).integers(0, 512, (4, 32)), jnp.int32)

    def loss(model, remat):
        return model(tokens, rngs=nnx.Rngs(dropout=jax.random.key(3)), remat=remat).mean()

    with jax.set_mesh(mesh):
        grad = nnx.jit(nnx.value_and_grad(loss), static_argnums=1)
        (plain, plain_grads), (rematted, rematted_grads) = grad(model, "none"), grad(model, remat)
    assert float(rematted) == pytest.approx(float(plain), rel=1e-6)
    for a, b in zip(jax.tree.leaves(plain_grads), jax.tree.leaves(rematted_grads), strict=True):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-7)
