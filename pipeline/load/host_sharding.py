"""Which records each part of the global batch reads, in which order, epoch after epoch.

The global batch is cut into `shard_count` equal parts; a process feeds one of them, and processes
that share a position on the mesh's data axis feed the same one (they pass the same `shard_index`
and get identical batches). Every epoch is one global permutation of the split's records, drawn from
the seed and the epoch number; part `i` of `n` takes the records at positions `i, i + n, i + 2n, ...`
of it. The parts are disjoint, each exactly `R // n` records, and together they cover the split less
the `R % n` records that land at the end of that epoch's permutation (different ones each epoch, so
none is left out for good). Shuffling globally before striding, instead of sharding the files, gives
every part a fresh random share of the whole split each epoch.
"""

from __future__ import annotations

import grain
import numpy as np


def resolve_shard(shard_index: int | None, shard_count: int | None) -> tuple[int, int]:
    """Fills what is not given from JAX's process index and count.

    JAX is imported only here, so `prepare` workers and tools that pass both never need it.
    """
    if shard_index is None or shard_count is None:
        import jax

        shard_index = jax.process_index() if shard_index is None else shard_index
        shard_count = jax.process_count() if shard_count is None else shard_count
    if not 0 <= shard_index < shard_count:
        raise ValueError(f"shard_index must be in [0, shard_count) (got {shard_index=}, {shard_count=})")
    return shard_index, shard_count


def shuffle_seed(seed: int, source: int) -> int:
    """A 32-bit base seed mixed from the user's seed and the source's position in a mixture.

    Grain's shuffle uses `base + epoch` for each epoch; mixing keeps seed 1 from replaying seed 0's
    epochs shifted by one, and two sources of equal size from being shuffled alike.
    """
    return int(np.random.SeedSequence((seed, source)).generate_state(1, dtype=np.uint32)[0])


def host_records(
    records: grain.MapDataset, *, seed: int, shard_index: int, shard_count: int, source: int = 0
) -> grain.MapDataset:
    """Part `shard_index`'s records of epoch 0; index `e * len + j` reads record `j` of epoch `e`.

    Built from Grain's own pieces: `shuffle` reseeds each epoch for indices past its length and
    `slice` carries the epoch through to its parent, so `.repeat()`, a `.batch(...)` then
    `.repeat()`, or a mixture reading past the end, walk later epochs with fresh permutations.
    """
    total = len(records)
    per_shard = total // shard_count
    if per_shard == 0:
        raise ValueError(
            f"the split has {total} records, fewer than the {shard_count} parts of the global batch "
            "reading it; use a smaller shard_count or prepare with smaller records"
        )
    usable = per_shard * shard_count
    return records.shuffle(seed=shuffle_seed(seed, source))[shard_index:usable:shard_count]
