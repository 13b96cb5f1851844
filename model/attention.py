"""Causal self-attention through cuDNN's fused kernel where it runs, XLA's everywhere else.

The choice is made when the step is traced, from the platform and the shapes: no flag, and no
fallback on error. Both paths compute the same function (causal, and with `segment_ids` within one
segment), so which one ran changes rounding only; a cuDNN error is raised, never swallowed into a
quiet switch to the other kernel.
"""

from __future__ import annotations

import jax
import jax.extend
import jax.numpy as jnp

CUDNN = "cudnn"
XLA = "xla"
# What cuDNN's flash attention takes (jax's cudnn path checks the same): half-precision inputs and a
# head size that is a multiple of 8, at most 128 on every GPU generation it supports.
_CUDNN_DTYPES = (jnp.dtype(jnp.bfloat16), jnp.dtype(jnp.float16))
_CUDNN_MAX_HEAD = 128


def platform() -> str:
    """'cuda' for an NVIDIA GPU backend, else the backend's platform ('cpu', 'tpu', 'gpu' for
    ROCm)."""
    backend = jax.extend.backend.get_backend()
    if backend.platform == "gpu" and "cuda" in backend.platform_version.lower():
        return "cuda"
    return backend.platform


def choose(platform: str, *, dtype, head_dim: int, seq_len: int, segments: bool) -> tuple[str, str]:
    """The implementation for these inputs, and why: cuDNN on a CUDA GPU with inputs it takes."""
    if platform != "cuda":
        return XLA, f"cuDNN's fused attention needs a CUDA GPU (here: {platform})"
    if jnp.dtype(dtype) not in _CUDNN_DTYPES:
        return (
            XLA,
            f"cuDNN's fused attention needs bfloat16 or float16 inputs (here: {jnp.dtype(dtype)}; "
            "--bf16)",
        )
    if head_dim % 8 or head_dim > _CUDNN_MAX_HEAD:
        return (
            XLA,
            "cuDNN's fused attention needs a head size that is a multiple of 8 up to 128 (here: "
            f"{head_dim})",
        )
    if segments and seq_len % 2:
        # Document packing passes the segment rule as a bias, whose gradient cuDNN computes for even
        # lengths.
        return (
            XLA,
            "cuDNN's fused attention with segments needs an even sequence length (here: "
            f"{seq_len})",
        )
    return CUDNN, "cuDNN's fused kernel"


def segment_mask(segment_ids: jax.Array) -> jax.Array:
    """(B, 1, T, T): True where query and key are in the same segment (padding, id 0, is a segment
    of its own, so no row is empty)."""
    return segment_ids[:, None, :, None] == segment_ids[:, None, None, :]


def causal_attention(
    q: jax.Array, k: jax.Array, v: jax.Array, segment_ids: jax.Array | None = None
) -> jax.Array:
    """(B, T, nh, hs) in and out. Causal is a flag, not a mask: cuDNN skips the blocks above the
    diagonal, and XLA builds the triangle itself."""
    _, t, _, hs = q.shape
    implementation, _ = choose(
        platform(), dtype=q.dtype, head_dim=hs, seq_len=t, segments=segment_ids is not None
    )
    mask = None if segment_ids is None else segment_mask(segment_ids)
    return jax.nn.dot_product_attention(
        q, k, v, mask=mask, is_causal=True, implementation=implementation
    )


def materialized_attention(
    q: jax.Array, k: jax.Array, v: jax.Array, segment_ids: jax.Array | None = None
) -> jax.Array:
    """The same function through one materialized (B, 1, T, T) mask, as XLA computes it without the
    causal flag: the reference the fused paths are checked against."""
    t = q.shape[1]
    mask = jnp.tril(jnp.ones((t, t), bool))[None, None]
    if segment_ids is not None:
        mask = mask & segment_mask(segment_ids)
    return jax.nn.dot_product_attention(q, k, v, mask=mask)
