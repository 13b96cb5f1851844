"""A GPT-2-style decoder in Flax NNX, every parameter annotated with how it shards.

Mesh axes are `data` and `model`. Weights split their "wide" dimension (heads, MLP hidden, vocab)
over `model` (tensor parallelism, Megatron-style: column-parallel in, row-parallel out), and, with
`fsdp=True`, their other dimension over `data`. Data parallelism, tensor parallelism and FSDP are
then only a change of mesh shape: the model code does not change.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from model.attention import causal_attention
from model.config import DATA, MODEL, REMAT_POLICIES, GPTConfig
from schemas.errors import SettingError

_INIT = nnx.initializers.normal(stddev=0.02)
# What each `remat` name (model/config.py) saves for the backward pass: the rest is recomputed.
_SAVED = {
    "full": jax.checkpoint_policies.nothing_saveable,
    # The linear layers' outputs (dots without batch dimensions); attention's scores, softmax, GELU
    # and LayerNorm are recomputed.
    "dots": jax.checkpoint_policies.dots_with_no_batch_dims_saveable,
}
assert set(_SAVED) | {"none"} == set(REMAT_POLICIES)


def _param(init, *axes: str | None):
    return nnx.with_partitioning(init, axes)


class CausalSelfAttention(nnx.Module):
    def __init__(self, config: GPTConfig, *, rngs: nnx.Rngs):
        fsdp = DATA if config.fsdp else None
        d = config.width
        self.num_heads = config.num_heads
        self.qkv = nnx.Linear(
            d,
            3 * d,
            kernel_init=_param(_INIT, fsdp, MODEL),
            bias_init=_param(nnx.initializers.zeros, MODEL),
            dtype=config.compute_dtype,
            rngs=rngs,
        )
        # Residual projections start smaller, scaled by depth (GPT-2).
        proj_init = nnx.initializers.normal(stddev=0.02 / (2 * config.num_layers) ** 0.5)
        self.out = nnx.Linear(
            d,
            d,
            kernel_init=_param(proj_init, MODEL, fsdp),
            bias_init=_param(nnx.initializers.zeros, None),
            dtype=config.compute_dtype,
            rngs=rngs,
        )
        self.dropout = nnx.Dropout(config.dropout)

    def __call__(
        self, x: jax.Array, segment_ids: jax.Array | None, rngs: nnx.Rngs | None
    ) -> jax.Array:
        b, t, d = x.shape
        q, k, v = jnp.split(
            self.qkv(x).reshape(b, t, 3 * self.num_heads, d // self.num_heads), 3, axis=2
        )
        y = causal_attention(q, k, v, segment_ids)  # (B, T, nh, hs)
        return self.dropout(self.out(y.reshape(b, t, d)), deterministic=rngs is None, rngs=rngs)


class MLP(nnx.Module):
    def __init__(self, config: GPTConfig, *, rngs: nnx.Rngs):
        fsdp = DATA if config.fsdp else None
        proj_init = nnx.initializers.normal(stddev=0.02 / (2 * config.num_layers) ** 0.5)
        self.fc = nnx.Linear(
            config.width,
            config.mlp_width,
            kernel_init=_param(_INIT, fsdp, MODEL),
            bias_init=_param(nnx.initializers.zeros, MODEL),
            dtype=config.compute_dtype,
            rngs=rngs,
        )
        self.proj = nnx.Linear(
            config.mlp_width,
            config.width,
            kernel_init=_param(proj_init, MODEL, fsdp),
            bias_init=_param(nnx.initializers.zeros, None),
            dtype=config.compute_dtype,
            rngs=rngs,
        )
        self.dropout = nnx.Dropout(config.dropout)

    def __call__(self, x: jax.Array, rngs: nnx.Rngs | None) -> jax.Array:
        y = self.proj(jax.nn.gelu(self.fc(x), approximate=True))
        return self.dropout(y, deterministic=rngs is None, rngs=rngs)


def _layer_norm(config: GPTConfig, rngs: nnx.Rngs) -> nnx.LayerNorm:
    return nnx.LayerNorm(
        config.width,
        epsilon=1e-5,
        scale_init=_param(nnx.initializers.ones, None),
        bias_init=_param(nnx.initializers.zeros, None),
        dtype=config.compute_dtype,
        rngs=rngs,
    )


class Block(nnx.Module):
    def __init__(self, config: GPTConfig, *, rngs: nnx.Rngs):
        self.ln1 = _layer_norm(config, rngs)
        self.attn = CausalSelfAttention(config, rngs=rngs)
        self.ln2 = _layer_norm(config, rngs)
        self.mlp = MLP(config, rngs=rngs)

    def __call__(
        self, x: jax.Array, segment_ids: jax.Array | None, rngs: nnx.Rngs | None
    ) -> jax.Array:
        x = x + self.attn(self.ln1(x), segment_ids, rngs)
        return x + self.mlp(self.ln2(x), rngs)


class GPT(nnx.Module):
    def __init__(self, config: GPTConfig, *, rngs: nnx.Rngs):
        fsdp = DATA if config.fsdp else None
        self.config = config
        # The vocabulary is padded to a multiple of 128 (nanoGPT's 50304): faster matmuls, and the
        # padded ids never occur as targets, so the model learns to give them no probability.
        self.wte = nnx.Embed(
            config.padded_vocab_size,
            config.width,
            embedding_init=_param(_INIT, MODEL, fsdp),
            dtype=config.compute_dtype,
            rngs=rngs,
        )
        self.wpe = nnx.Embed(
            config.max_seq_len,
            config.width,
            embedding_init=_param(nnx.initializers.normal(0.01), None, fsdp),
            dtype=config.compute_dtype,
            rngs=rngs,
        )
        self.dropout = nnx.Dropout(config.dropout)
        self.blocks = nnx.List([Block(config, rngs=rngs) for _ in range(config.num_layers)])
        self.ln_f = _layer_norm(config, rngs)

    def __call__(self, tokens: jax.Array, **kwargs) -> jax.Array:
        """Logits (B, T, padded vocab) in float32 for token ids (B, T); `kwargs` as `features` takes
        them."""
        return self.logits(self.features(tokens, **kwargs))

    def features(
        self,
        tokens: jax.Array,
        *,
        segment_ids: jax.Array | None = None,
        positions: jax.Array | None = None,
        rngs: nnx.Rngs | None = None,
        remat: str = "none",
    ) -> jax.Array:
        """The final LayerNorm's output (B, T, width), what the logits are read from: a loss can
        take them a slice at a time instead of holding every position's logits at once.

        `remat` (REMAT_POLICIES) trades compute for memory under a gradient: "full" keeps only each
        block's input for the backward pass and recomputes the block, "dots" also keeps its matmuls'
        outputs. The values computed are the same.

        With `segment_ids`, a token attends only to earlier tokens of its own segment, and
        `positions` restart at each segment, so packed documents do not see one another.
        Dropout applies only when `rngs` are given: the trainer derives them from the seed and
        the step, so the model holds no random state and a resumed run draws the same masks.
        """
        b, t = tokens.shape
        if t > self.config.max_seq_len:
            raise ValueError(
                f"sequence of {t} tokens is longer than max_seq_len {self.config.max_seq_len}"
            )
        if positions is None:
            positions = jnp.broadcast_to(jnp.arange(t), (b, t))
        x = self.dropout(
            self.wte(tokens) + self.wpe(positions), deterministic=rngs is None, rngs=rngs
        )
        if remat not in REMAT_POLICIES:
            raise SettingError("remat", remat, f"must be one of {REMAT_POLICIES}")
        run = Block.__call__ if remat == "none" else nnx.remat(Block.__call__, policy=_SAVED[remat])
        for block in self.blocks:
            x = run(block, x, segment_ids, rngs)
        return self.ln_f(x)

    def logits(self, features: jax.Array) -> jax.Array:
        """Float32 logits over the padded vocabulary, through the tied token embedding."""
        return self.wte.attend(features).astype(jnp.float32)
