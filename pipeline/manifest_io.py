"""Reading a prepared directory from the prepare side (any Beam filesystem): manifest, records."""

from __future__ import annotations

import numpy as np
from array_record.python.array_record_module import ArrayRecordReader

from pipeline import storage
from schemas import formats
from schemas.manifest import Manifest, ManifestError
from schemas.records import decode_record


def read_manifest(data_dir: str) -> Manifest:
    path = storage.join(data_dir, formats.MANIFEST_NAME)
    if not storage.exists(path):
        raise ManifestError(f"{data_dir} has no {formats.MANIFEST_NAME}; is it a prepared directory?")
    return Manifest.from_json(storage.read_text(path))


def read_records(data_dir: str, manifest: Manifest, split: str, limit: int | None = None) -> list[np.ndarray]:
    """The split's records in manifest order (the order the loader indexes them), up to `limit`."""
    records: list[np.ndarray] = []
    for shard in manifest.shards_of(split):
        if limit is not None and len(records) >= limit:
            break
        with storage.local_copy(storage.join(data_dir, shard.path)) as path:
            reader = ArrayRecordReader(path)
            count = reader.num_records() if limit is None else min(limit - len(records), reader.num_records())
            records += [decode_record(r, manifest.dtype) for r in reader.read(list(range(count)))]
            reader.close()
    return records
