"""Mixing prepared datasets record by record, in the token shares the data spec asks for.

Each source is shuffled and split over hosts on its own (`host_sharding`), then Grain's
`MapDataset.mix` interleaves the sources' records in fixed integer proportions: deterministic, random
access (so a checkpoint is still a chunk index) and smooth (every run of a few hundred records holds
each source in proportion). Grain scales the proportions so that the smallest is 100 and truncates
the others, so a realized token share can differ from the asked one by up to a quarter of a
percentage point.

Weights are token shares, but the mixture selects records, and records hold different numbers of
tokens per source (many short documents per record in one, one long document per record in
another). So a source's record proportion is its weight divided by its mean tokens per record.

One epoch of a mixture ends when the source that runs out first, the one with the fewest records
per unit of proportion, has been read once (give or take its last record: Grain rounds the epoch
length down); the other sources are then part-way through theirs.
Later epochs continue every source where it stood, and each source starts a fresh permutation at
its own epoch boundaries, so a small source with a large weight is repeated, reshuffled each time,
while a large one is read through once over several mixture epochs.
"""

from __future__ import annotations

from collections.abc import Sequence

from pipeline.load.errors import LoaderError
from schemas.manifest import Manifest, TokenizerInfo


def record_proportions(token_weights: Sequence[float], tokens_per_record: Sequence[float]) -> list[float]:
    """Record-selection proportions (summing to 1) that give each source its share of tokens."""
    raw = [w / t for w, t in zip(token_weights, tokens_per_record)]
    return [r / sum(raw) for r in raw]


def _tokenizer_key(tokenizer: TokenizerInfo) -> tuple:
    """What the ids mean, whatever the backend: the identity hash and the boundary ids (the name may
    differ for one table, as `gpt2` and `r50k_base` do)."""
    return tokenizer.library, tokenizer.vocab_sha256, tokenizer.n_vocab, tokenizer.eot_id, tokenizer.bos_id


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
                f"the sources store tokens differently: {first_name!r} as {first.dtype}, {name!r} as "
                f"{manifest.dtype}; prepare them again with the same tokenizer and release"
            )
