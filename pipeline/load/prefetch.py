"""Reading ahead in worker processes: Grain's `mp_prefetch`, set up as the loader needs it."""

from __future__ import annotations

import grain

_WORKER_BUFFER = 4  # windows read ahead in each prefetch worker
# Smaller arrays (a window's source token counts) travel pickled: a shared-memory segment costs
# more.
_MIN_SHARED_BYTES = 2**16


def in_workers(ds: grain.IterDataset, worker_count: int) -> grain.IterDataset:
    """`ds`, its elements made in `worker_count` processes, each taking every `worker_count`-th."""
    ds = grain.experimental.WithOptionsIterDataset(
        ds, grain.experimental.DatasetOptions(min_shm_size=_MIN_SHARED_BYTES)
    )
    _allow_unparsed_absl_flags()
    return ds.mp_prefetch(
        grain.MultiprocessingOptions(
            num_workers=worker_count, per_worker_buffer_size=_WORKER_BUFFER
        )
    )


def _allow_unparsed_absl_flags() -> None:
    """Lets Grain's multiprocess prefetch run in programs that do not parse absl flags.

    Grain 0.2.18 reads an absl flag when it starts workers and fails if flags were never parsed,
    as in any script not started through `absl.app` (google/grain#1355, fixed upstream). Marking
    them parsed keeps every flag at its default; a program that parses its flags is left alone.
    """
    from absl import flags

    if not flags.FLAGS.is_parsed():
        flags.FLAGS.mark_as_parsed()
