"""Which records each host reads, in which order, epoch after epoch.

Every epoch is one global permutation of the split's records, drawn from the seed and the epoch
number; host `i` of `n` takes the records at positions `i, i + n, i + 2n, ...` of it. The hosts'
parts are disjoint, each exactly `R // n` records, and together they cover the split less the
`R % n` records that land at the end of that epoch's permutation (different ones each epoch, so
none is left out for good). Shuffling globally before striding, instead of sharding the files,
gives every host a fresh random part of the whole split each epoch.
"""

from __future__ import annotations

import grain
import numpy as np


def resolve_process(process_index: int | None, process_count: int | None) -> tuple[int, int]:
    """Fills what is not given from JAX, imported only here so `prepare` workers never need it."""
    if process_index is None or process_count is None:
        import jax

        process_index = jax.process_index() if process_index is None else process_index
        process_count = jax.process_count() if process_count is None else process_count
    if not 0 <= process_index < process_count:
        raise ValueError(
            f"process_index must be in [0, process_count) (got {process_index=}, {process_count=})"
        )
    return process_index, process_count


def shuffle_seed(seed: int) -> int:
    """A 32-bit base seed mixed from the user's seed.

    Grain's shuffle uses `base + epoch` for each epoch; mixing keeps seed 1 from replaying seed 0's
    epochs shifted by one.
    """
    return int(np.random.SeedSequence(seed).generate_state(1, dtype=np.uint32)[0])


def host_records(
    records: grain.MapDataset, *, seed: int, process_index: int, process_count: int
) -> grain.MapDataset:
    """This host's part of epoch 0; index `e * len + j` reads record `j` of its part of epoch `e`.

    Built from Grain's own pieces: `shuffle` reseeds each epoch for indices past its length and
    `slice` carries the epoch through to its parent, so `.repeat()` (or a `.batch(...)` then
    `.repeat()`) downstream walks later epochs with fresh permutations.
    """
    total = len(records)
    per_host = total // process_count
    if per_host == 0:
        raise ValueError(
            f"the split has {total} records, fewer than the {process_count} processes reading it; "
            "use fewer processes or prepare with smaller records"
        )
    usable = per_host * process_count
    return records.shuffle(seed=shuffle_seed(seed))[process_index:usable:process_count]
