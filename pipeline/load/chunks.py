"""The chunk stream the packers consume: records joined into chunks, read ahead, restartable anywhere.

A chunk is `{"tokens": 1-D array, "ends": end offset of each record in it, "sources": the mixture
position of each record's source}` (see `JoinRecords`). Chunks are elements of a MapDataset, so
chunk `k` is the same whoever reads it; prefetch workers only decide where it is read.

The stream's state is the index of the next chunk. Restoring it opens a fresh Grain pipeline over
the chunk dataset sliced at that index, with or without `mp_prefetch`, instead of restoring the
state of a prefetch pipeline (whose shape records its worker count): a checkpoint saved with any
number of workers restores into an iterator with any other. The price: a restore with workers
starts them anew at the next batch, which takes seconds (as the first batch of a fresh iterator).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import grain
import numpy as np

from schemas.records import numpy_dtype

# Read-ahead of chunks (in each prefetch worker, or in the main process without workers): enough to
# hide reads behind packing, little memory.
_READ_OPTIONS = grain.ReadOptions(num_threads=2, prefetch_buffer_size=4)
_WORKER_BUFFER = 4


@dataclasses.dataclass(frozen=True)
class TagSource:
    """Grain map function: a raw record -> (its source's position in the mixture, the record)."""

    source: int

    def __call__(self, record: bytes) -> tuple[int, bytes]:
        return self.source, record


@dataclasses.dataclass(frozen=True)
class JoinRecords:
    """Grain batch function: consecutive tagged records to one chunk (runs in the prefetch workers)."""

    dtype_name: str

    def __call__(self, records: Sequence[tuple[int, bytes]]) -> dict[str, np.ndarray]:
        dtype = numpy_dtype(self.dtype_name)
        arrays = [np.frombuffer(record, dtype=dtype) for _, record in records]
        return {
            "tokens": np.concatenate(arrays),
            "ends": np.cumsum([len(a) for a in arrays], dtype=np.int64),
            "sources": np.array([source for source, _ in records], dtype=np.int32),
        }


class ChunkStreamIterDataset(grain.IterDataset):
    """The chunks of `chunks` in order, read ahead by `worker_count` processes (0: threads only)."""

    def __init__(self, chunks: grain.MapDataset, *, worker_count: int):
        super().__init__(chunks)
        self._chunks = chunks
        self._worker_count = worker_count

    def __iter__(self) -> grain.DatasetIterator:
        return _ChunkStreamIterator(self._chunks, worker_count=self._worker_count)

    def __str__(self) -> str:
        return f"ChunkStreamIterDataset(worker_count={self._worker_count})"


class _ChunkStreamIterator(grain.DatasetIterator):
    """Opens its read-ahead pipeline at the first `next`, so a restore right after creation starts
    no workers that it would then have to stop."""

    def __init__(self, chunks: grain.MapDataset, *, worker_count: int):
        super().__init__()
        self._chunks = chunks
        self._worker_count = worker_count
        self._next_chunk = 0
        self._reader: grain.DatasetIterator | None = None

    def _open(self) -> grain.DatasetIterator:
        ds = self._chunks[self._next_chunk :].to_iter_dataset(_READ_OPTIONS)
        if self._worker_count:
            _allow_unparsed_absl_flags()
            ds = ds.mp_prefetch(
                grain.MultiprocessingOptions(num_workers=self._worker_count, per_worker_buffer_size=_WORKER_BUFFER)
            )
        return iter(ds)

    def __next__(self) -> dict[str, np.ndarray]:
        if self._reader is None:
            self._reader = self._open()
        chunk = next(self._reader)
        self._next_chunk += 1
        return chunk

    def get_state(self) -> dict[str, Any]:
        return {"next_chunk": self._next_chunk}

    def set_state(self, state: dict[str, Any]) -> None:
        self._close_reader()
        self._next_chunk = int(state["next_chunk"])

    def _close_reader(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None

    def close(self) -> None:
        self._close_reader()
        super().close()

    def __str__(self) -> str:
        return f"ChunkStreamIterator(worker_count={self._worker_count})"


def _allow_unparsed_absl_flags() -> None:
    """Lets Grain's multiprocess prefetch run in programs that do not parse absl flags.

    Grain 0.2.18 reads an absl flag when it starts workers and fails if flags were never parsed,
    as in any script not started through `absl.app` (google/grain#1355, fixed upstream). Marking
    them parsed keeps every flag at its default; a program that parses its flags is left alone.
    """
    from absl import flags

    if not flags.FLAGS.is_parsed():
        flags.FLAGS.mark_as_parsed()
