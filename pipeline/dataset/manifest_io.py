"""Reading a prepared directory from the prepare side (any Beam filesystem): manifest, records."""

from __future__ import annotations

import os

import numpy as np
from array_record.python.array_record_module import ArrayRecordReader

from pipeline.dataset import storage
from schemas import formats
from schemas.manifest import Manifest, ManifestError
from schemas.records import decode_record


def read_manifest(data_dir: str) -> Manifest:
    path = storage.join(data_dir, formats.MANIFEST_NAME)
    if not storage.exists(path):
        raise ManifestError(
            f"{data_dir} has no {formats.MANIFEST_NAME}; is it a prepared directory?"
        )
    return Manifest.from_json(storage.read_text(path))


def shard_sizes(data_dir: str) -> dict[str, int]:
    """Relative shard path -> size of the files in the split directories, from one listing per
    split."""
    sizes = {}
    for split in formats.SPLITS:
        for path, size in storage.sizes_in(storage.join(data_dir, split)).items():
            sizes[f"{split}/{os.path.basename(path)}"] = size
    return sizes


def read_records(
    data_dir: str, manifest: Manifest, split: str, limit: int | None = None
) -> list[np.ndarray]:
    """The split's records in manifest order (the order the loader indexes them), up to `limit`."""
    records: list[np.ndarray] = []
    for shard in manifest.shards_of(split):
        if limit is not None and len(records) >= limit:
            break
        with storage.local_copy(storage.join(data_dir, shard.path)) as path:
            reader = ArrayRecordReader(path)
            count = (
                reader.num_records()
                if limit is None
                else min(limit - len(records), reader.num_records())
            )
            records += [decode_record(r, manifest.dtype) for r in reader.read(list(range(count)))]
            reader.close()
    return records
