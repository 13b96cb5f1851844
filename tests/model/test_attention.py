"""Attention: the causal flag and the segment rule compute what a materialized mask does, cuDNN is
chosen only where it runs, and a cuDNN failure is an error, never a quiet switch of kernels."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import model.attention as attention
from model.attention import CUDNN, XLA, causal_attention, choose, materialized_attention


def _qkv(dtype, b=2, t=16, heads=4, size=8):
    keys = jax.random.split(jax.random.key(0), 3)
    return [jax.random.normal(k, (b, t, heads, size), jnp.float32).astype(dtype) for k in keys]


def _segments(b=2, t=16) -> jax.Array:
    # Two documents then padding (id 0) in the first row, one document filling the second.
    return jnp.array([[1] * 5 + [2] * 7 + [0] * (t - 12), [1] * t][:b], jnp.int32)


@pytest.mark.integration
@pytest.mark.parametrize("dtype, tolerance", [(jnp.float32, 1e-6), (jnp.bfloat16, 1e-2)])
@pytest.mark.parametrize("segments", [False, True])
def test_the_causal_flag_and_segment_rule_match_amaterialized_attention_mask(
    dtype, tolerance, segments
):
    q, k, v = _qkv(dtype)
    segment_ids = _segments() if segments else None
    ours = jax.jit(causal_attention)(q, k, v, segment_ids)
    reference = materialized_attention(q, k, v, segment_ids)
    # Relative as well as absolute: cuDNN's and XLA's roundings may differ by one bf16 ulp, up to
    # 2**-7 of a value (0.0156 at 2.6 on an H200).
    np.testing.assert_allclose(
        np.asarray(ours, np.float32),
        np.asarray(reference, np.float32),
        atol=tolerance,
        rtol=tolerance,
    )

    def loss(f, q, k, v):
        return (f(q, k, v, segment_ids).astype(jnp.float32) ** 2).sum()

    ours_grads = jax.grad(lambda *a: loss(causal_attention, *a), argnums=(0, 1, 2))(q, k, v)
    reference_grads = jax.grad(lambda *a: loss(materialized_attention, *a), argnums=(0, 1, 2))(
        q, k, v
    )
    for a, b in zip(ours_grads, reference_grads):
        np.testing.assert_allclose(
            np.asarray(a, np.float32),
            np.asarray(b, np.float32),
            atol=tolerance * 10,
            rtol=tolerance,
        )


@pytest.mark.parametrize(
    "platform, dtype, head_dim, seq_len, segments, expected",
    [
        ("cuda", jnp.bfloat16, 64, 1024, False, CUDNN),
        ("cuda", jnp.float16, 128, 1024, True, CUDNN),
        ("cpu", jnp.bfloat16, 64, 1024, False, XLA),
        ("tpu", jnp.bfloat16, 64, 1024, True, XLA),
        ("gpu", jnp.bfloat16, 64, 1024, False, XLA),  # ROCm: no cuDNN
        ("cuda", jnp.float32, 64, 1024, False, XLA),  # without --bf16
        ("cuda", jnp.bfloat16, 60, 1024, False, XLA),
        ("cuda", jnp.bfloat16, 256, 1024, False, XLA),
        ("cuda", jnp.bfloat16, 64, 1023, True, XLA),
        ("cuda", jnp.bfloat16, 64, 1023, False, CUDNN),
    ],
)
def test_cudnn_is_chosen_on_cuda_for_the_inputs_it_takes(
    platform, dtype, head_dim, seq_len, segments, expected
):
    implementation, why = choose(
        platform, dtype=dtype, head_dim=head_dim, seq_len=seq_len, segments=segments
    )
    assert implementation == expected
    assert why


def _backend() -> str:
    """The backend present, from its devices: 'cuda' for NVIDIA GPUs, 'rocm' for AMD's, else the
    platform."""
    device = jax.devices()[0]
    if device.platform == "gpu":
        return "cuda" if "cuda" in device.client.platform_version.lower() else "rocm"
    return device.platform


ON_CUDA = _backend() == "cuda"


@pytest.mark.integration
@pytest.mark.parametrize("segments", [False, True])
def test_this_machine_runs_the_kernel_its_backend_takes(segments):
    expected = CUDNN if ON_CUDA else XLA
    q, k, v = _qkv(jnp.bfloat16, t=64, size=64)
    segment_ids = _segments(t=64) if segments else None
    assert (
        choose(attention.platform(), dtype=q.dtype, head_dim=64, seq_len=64, segments=segments)[0]
        == expected
    )
    # The step runs the kernel chosen: cuDNN's fused attention is a custom call of its own.
    lowered = jax.jit(causal_attention).lower(q, k, v, segment_ids).as_text()
    assert ("__cudnn$fmha" in lowered) == (expected == CUDNN)


@pytest.mark.skipif(not ON_CUDA, reason="cuDNN's fused attention runs on a CUDA GPU only")
@pytest.mark.parametrize("segments", [False, True])
def test_cudnns_outputs_and_gradients_match_the_reference(segments):
    q, k, v = _qkv(jnp.bfloat16, t=128, size=64)
    segment_ids = _segments(t=128) if segments else None
    assert "__cudnn$fmha" in jax.jit(causal_attention).lower(q, k, v, segment_ids).as_text()
    exact = [x.astype(jnp.float32) for x in (q, k, v)]  # the same inputs; the reference in float32

    def close(ours, reference):
        # bfloat16 keeps 8 bits of mantissa: within 2% of the largest value, where a wrong mask is
        # far off.
        ours, reference = np.asarray(ours, np.float32), np.asarray(reference, np.float32)
        np.testing.assert_allclose(ours, reference, atol=0.02 * np.abs(reference).max())

    close(
        jax.jit(causal_attention)(q, k, v, segment_ids),
        jax.jit(materialized_attention)(*exact, segment_ids),
    )

    def loss(f, q, k, v):
        return (f(q, k, v, segment_ids).astype(jnp.float32) ** 2).sum()

    ours = jax.jit(jax.grad(lambda *a: loss(causal_attention, *a), argnums=(0, 1, 2)))(q, k, v)
    reference = jax.jit(jax.grad(lambda *a: loss(materialized_attention, *a), argnums=(0, 1, 2)))(
        *exact
    )
    for a, b in zip(ours, reference):
        close(a, b)


@pytest.mark.skipif(ON_CUDA, reason="cuDNN runs here: there is no failing cuDNN choice to make")
def test_a_cudnn_choice_that_cannot_run_raises_instead_of_switching_kernels(monkeypatch):
    monkeypatch.setattr(attention, "platform", lambda: "cuda")
    q, k, v = _qkv(jnp.bfloat16)
    with pytest.raises(RuntimeError, match="cuDNN is not detected"):
        jax.block_until_ready(jax.jit(causal_attention)(q, k, v))
