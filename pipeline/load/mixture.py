"""Checks that the sources of a mixture can be mixed: their token ids mean the same and are stored
alike.

How records of several sources are interleaved in their token shares, stage by stage, is part of
the global plan (`pipeline.load.global_index`).
"""

from __future__ import annotations

from collections.abc import Sequence

from pipeline.load.errors import LoaderError
from schemas.manifest import Manifest, TokenizerInfo


def _tokenizer_key(tokenizer: TokenizerInfo) -> tuple:
    """What the ids mean, whatever the backend: the identity hash and the boundary ids (the name may
    differ for one table, as `gpt2` and `r50k_base` do)."""
    return (
        tokenizer.library,
        tokenizer.vocab_sha256,
        tokenizer.n_vocab,
        tokenizer.eot_id,
        tokenizer.bos_id,
    )


def _describe(tokenizer: TokenizerInfo) -> str:
    return (
        f"{tokenizer.name} ({tokenizer.library}, identity {tokenizer.vocab_sha256[:12]}..., "
        f"{tokenizer.n_vocab} ids, end-of-text {tokenizer.eot_id}, BOS {tokenizer.bos_id})"
    )


def check_compatible(names: Sequence[str], manifests: Sequence[Manifest]) -> None:
    """Refuses sources whose token ids do not mean the same thing or are stored differently."""
    first_name, first = names[0], manifests[0]
    for name, manifest in zip(names[1:], manifests[1:]):
        if _tokenizer_key(manifest.tokenizer) != _tokenizer_key(first.tokenizer):
            raise LoaderError(
                f"the sources do not share one tokenizer: {first_name!r} was prepared with "
                f"{_describe(first.tokenizer)}, {name!r} with {_describe(manifest.tokenizer)}; "
                "prepare every source with the same tokenizer"
            )
        if manifest.dtype != first.dtype:
            raise LoaderError(
                f"the sources store tokens differently: {first_name!r} as {first.dtype}, {name!r} "
                f"as {manifest.dtype}; prepare them again with the same tokenizer and release"
            )
