"""Writing one ArrayRecord shard whole, then publishing it under its final name."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable

from array_record.python.array_record_module import ArrayRecordWriter

from pipeline import storage
from pipeline.integrity import file_sha256
from schemas import formats


@dataclasses.dataclass(frozen=True)
class WrittenShard:
    records: int
    bytes: int
    sha256: str


def write_shard(path: str, records: Iterable[bytes]) -> WrittenShard:
    """The shard appears at `path` only once complete; its hash is of the bytes published."""
    with storage.atomic_local_file(path) as scratch:
        writer = ArrayRecordWriter(scratch, formats.ARRAY_RECORD_OPTIONS)
        count = 0
        for record in records:
            writer.write(record)
            count += 1
        writer.close()
        with open(scratch, "rb") as f:
            written = WrittenShard(records=count, bytes=os.path.getsize(scratch), sha256=file_sha256(f))
    return written
