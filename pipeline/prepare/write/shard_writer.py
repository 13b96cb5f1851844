"""Writing one ArrayRecord shard in a stream of records, then publishing it under its final name."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable

from array_record.python.array_record_module import ArrayRecordWriter

from pipeline.dataset import storage
from pipeline.dataset.integrity import file_sha256
from schemas import formats


@dataclasses.dataclass(frozen=True)
class WrittenShard:
    records: int
    bytes: int
    sha256: str


class ShardWriter:
    """Records go to a local scratch file; `close` publishes it at `path`, `abort` drops it.

    The shard appears at `path` only once complete, and its hash is of the bytes published.
    """

    def __init__(self, path: str):
        self.path = path
        self.records = 0
        self._scratch = storage.new_scratch(path)
        self._writer = ArrayRecordWriter(self._scratch, formats.ARRAY_RECORD_OPTIONS)

    def write(self, record: bytes) -> None:
        self._writer.write(record)
        self.records += 1

    def close(self) -> WrittenShard:
        self._writer.close()
        with open(self._scratch, "rb") as f:
            written = WrittenShard(self.records, os.path.getsize(self._scratch), file_sha256(f))
        storage.publish(self._scratch, self.path)
        return written

    def abort(self) -> None:
        self._writer.close()
        storage.discard(self._scratch)


def write_shard(path: str, records: Iterable[bytes]) -> WrittenShard:
    writer = ShardWriter(path)
    try:
        for record in records:
            writer.write(record)
    except BaseException:
        writer.abort()
        raise
    return writer.close()
