"""A prepared split's tokens in the order prepare wrote them, read shard by shard in bounded memory.

Each shard is hashed against the manifest before its records are read, as `verify` would hash it:
a damaged shard stops the export with verify's words for it, before ArrayRecord is asked to parse
bytes that are not what prepare wrote. Documents are found as the loader finds them: each ends with
the manifest's end-of-text id, and a record that does not end with one (a long document cut into
records) is continued by the next, so the stream of tokens holds every document whole.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import numpy as np
from array_record.python.array_record_module import ArrayRecordReader

from pipeline.dataset import storage
from pipeline.dataset.integrity import ShardProblem, file_sha256, repair_hint
from schemas.errors import RunError
from schemas.manifest import Manifest, ShardInfo
from schemas.records import decode_record

# Tokens read at once (16 MiB of uint32), whatever the records' size: the export's memory bound.
CHUNK_TOKENS = 2**22


class ExportError(RunError, RuntimeError):
    """An export that cannot be written from this directory: damaged data, an unwritable output."""


@dataclasses.dataclass(frozen=True)
class Chunk:
    """Consecutive tokens of a split, and where documents end among them: `ends` are offsets from
    the split's first token, each just past an end-of-text id (datatrove's and Megatron's
    convention: the end of the document is the start of the next)."""

    tokens: np.ndarray
    ends: np.ndarray  # int64, absolute


def split_chunks(data_dir: str, manifest: Manifest, split: str) -> Iterator[Chunk]:
    """The split's tokens in manifest order (the order prepare wrote and the loader indexes)."""
    per_read = max(1, CHUNK_TOKENS // manifest.config.record_tokens)
    eot_id = manifest.tokenizer.eot_id
    position = 0
    for shard in manifest.shards_of(split):
        with storage.local_copy(storage.join(data_dir, shard.path)) as path:
            _check_hash(data_dir, shard, path)
            reader = ArrayRecordReader(path)
            try:
                count = reader.num_records()
                for first in range(0, count, per_read):
                    records = reader.read(first, min(first + per_read, count))
                    tokens = np.concatenate([decode_record(r, manifest.dtype) for r in records])
                    ends = np.flatnonzero(tokens == eot_id).astype(np.int64) + (position + 1)
                    position += len(tokens)
                    yield Chunk(tokens, ends)
            finally:
                reader.close()


def _check_hash(data_dir: str, shard: ShardInfo, path: str) -> None:
    with open(path, "rb") as f:
        if file_sha256(f) != shard.sha256:
            raise ExportError(f"{ShardProblem(shard, 'sha256')}; {repair_hint(data_dir)}")
