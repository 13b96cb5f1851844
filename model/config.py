"""Model sizes: a frozen config, named presets, and the FLOPs count used for MFU."""

from __future__ import annotations

import dataclasses

from schemas.errors import SettingError

DATA = "data"
MODEL = "model"
COMPUTE_DTYPES = ("float32", "bfloat16")
# What a block keeps for the backward pass (model/gpt.py): everything ("none": no
# rematerialization), its input alone ("full": the rest is recomputed), or its matmuls' outputs too
# ("dots").
REMAT_POLICIES = ("none", "full", "dots")


@dataclasses.dataclass(frozen=True)
class GPTConfig:
    vocab_size: int = 50257
    max_seq_len: int = 1024
    num_layers: int = 12
    num_heads: int = 12
    width: int = 768
    mlp_width: int = 3072
    dropout: float = 0.0
    dtype: str = "float32"
    fsdp: bool = False

    def __post_init__(self) -> None:
        # Sizes first: the divisibility check below divides by num_heads.
        for name in ("vocab_size", "max_seq_len", "num_layers", "num_heads", "width", "mlp_width"):
            if getattr(self, name) < 1:
                raise SettingError(name, getattr(self, name), "must be at least 1")
        if self.width % self.num_heads:
            raise SettingError(
                "width", self.width, "must be divisible by {num_heads}", num_heads=self.num_heads
            )
        if not 0.0 <= self.dropout < 1.0:
            raise SettingError("dropout", self.dropout, "must be in [0, 1)")
        if self.dtype not in COMPUTE_DTYPES:
            raise SettingError("dtype", self.dtype, f"must be one of {COMPUTE_DTYPES}")

    @property
    def padded_vocab_size(self) -> int:
        return -(-self.vocab_size // 128) * 128

    @property
    def compute_dtype(self):
        import jax.numpy as jnp  # here: the trainer's flags are checked before JAX loads

        return jnp.bfloat16 if self.dtype == "bfloat16" else jnp.float32

    def num_params(self) -> int:
        d, f, layers = self.width, self.mlp_width, self.num_layers
        per_block = 4 * d + (3 * d * d + 3 * d) + (d * d + d) + (d * f + f) + (f * d + d)
        return self.padded_vocab_size * d + self.max_seq_len * d + layers * per_block + 2 * d

    def flops_per_token(self, seq_len: int) -> float:
        """Training FLOPs per token (forward and backward), as in the PaLM paper's MFU: 6N plus
        attention's 12 * layers * width * seq_len; position embeddings are lookups, not FLOPs."""
        n = self.num_params() - self.max_seq_len * self.width
        return 6 * n + 12 * self.num_layers * self.width * seq_len


PRESETS: dict[str, GPTConfig] = {
    # Learns the embedded corpus in minutes on two CPU cores.
    "tiny": GPTConfig(max_seq_len=256, num_layers=4, num_heads=4, width=128, mlp_width=512),
    # The JAX AI Stack miniGPT tutorial's sizes.
    "minigpt": GPTConfig(max_seq_len=256, num_layers=4, num_heads=8, width=256, mlp_width=256),
    "gpt2": GPTConfig(),
    "gpt2-medium": GPTConfig(num_layers=24, num_heads=16, width=1024, mlp_width=4096),
}


def preset(name: str, **overrides) -> GPTConfig:
    if name not in PRESETS:
        raise SettingError("preset", name, f"must be one of {sorted(PRESETS)}")
    return dataclasses.replace(
        PRESETS[name], **{k: v for k, v in overrides.items() if v is not None}
    )
