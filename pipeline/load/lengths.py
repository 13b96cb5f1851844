"""The document lengths of every record of a split: what the global index plans batches from.

The manifest gives each shard's record and token totals, not each record's; the lengths come from
one sequential read of every shard, kept in a cache keyed by the shard's SHA-256 (from the
manifest), so a directory is scanned once per machine, whoever reads it later, and a shard
prepared again gets a fresh entry. Per shard the cache holds two .npy files, opened as memory
maps (never read whole):

    SHA256-docs.npy      uint32 [documents]   tokens of each document, end-of-text id included
    SHA256-firsts.npy    int64  [records + 1] index of each record's first document; the last
                                              entry is the shard's document count

So the index costs 4 bytes per document and 8 per record on disk, and in memory only the pages a
step touches.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile

import grain
import numpy as np
from etils import epath

from schemas.manifest import Manifest, ShardInfo
from schemas.records import numpy_dtype

CACHE_ENV = "TOKSHARDS_INDEX_CACHE"
_DEFAULT_CACHE = os.path.join("~", ".cache", "tokshards", "lengths")
_SCAN_BATCH = 256  # records read per call while scanning


def cache_dir() -> str:
    """Where lengths are cached: $TOKSHARDS_INDEX_CACHE, or ~/.cache/tokshards/lengths."""
    return os.path.expanduser(os.environ.get(CACHE_ENV) or _DEFAULT_CACHE)


def document_lengths(tokens: np.ndarray, ends: np.ndarray, eot_id: int) -> tuple[np.ndarray, np.ndarray]:
    """Document lengths of records joined in `tokens` (record `i` ends at `ends[i]`), and how many
    documents each record holds. A document ends after each end-of-text id, and at its record's end."""
    stops = np.union1d(np.flatnonzero(tokens == eot_id) + 1, ends)
    counts = np.diff(np.searchsorted(stops, ends, side="right"), prepend=0)
    return np.diff(stops, prepend=0).astype(np.uint32), counts


def _scan(path: str, shard: ShardInfo, dtype: np.dtype, eot_id: int) -> tuple[np.ndarray, np.ndarray]:
    source = grain.sources.ArrayRecordDataSource([f"{path}[0:{shard.records}]"])
    docs, counts = [], []
    for first in range(0, shard.records, _SCAN_BATCH):
        records = [np.frombuffer(r, dtype) for r in source.__getitems__(range(first, min(first + _SCAN_BATCH, shard.records)))]
        d, c = document_lengths(np.concatenate(records), np.cumsum([len(r) for r in records]), eot_id)
        docs.append(d)
        counts.append(c)
    firsts = np.concatenate(([0], np.cumsum(np.concatenate(counts)))).astype(np.int64)
    return np.concatenate(docs), firsts


def _save_atomically(path: str, array: np.ndarray) -> None:
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".npy.tmp")
    with os.fdopen(fd, "wb") as f:
        np.save(f, array)
    os.replace(tmp, path)


def shard_lengths(root: str, shard: ShardInfo, dtype_name: str, eot_id: int) -> tuple[np.ndarray, np.ndarray]:
    """A shard's (document lengths, first document of each record), from the cache or a scan."""
    directory = os.path.join(cache_dir(), f"eot{eot_id}")
    docs_path = os.path.join(directory, f"{shard.sha256}-docs.npy")
    firsts_path = os.path.join(directory, f"{shard.sha256}-firsts.npy")
    if not (os.path.exists(docs_path) and os.path.exists(firsts_path)):
        docs, firsts = _scan(str(epath.Path(root) / shard.path), shard, numpy_dtype(dtype_name), eot_id)
        os.makedirs(directory, exist_ok=True)
        _save_atomically(docs_path, docs)
        _save_atomically(firsts_path, firsts)
    # Plain arrays over the maps: slicing a np.memmap costs several times more, once per record.
    return np.asarray(np.load(docs_path, mmap_mode="r")), np.asarray(np.load(firsts_path, mmap_mode="r"))


@dataclasses.dataclass(frozen=True)
class SplitLengths:
    """The document lengths of a split's records, in manifest order, shard by shard."""

    docs: tuple[np.ndarray, ...]
    firsts: tuple[np.ndarray, ...]
    starts: np.ndarray  # the split's index of each shard's first record, then the record count

    @classmethod
    def of(cls, root: str, manifest: Manifest, split: str) -> SplitLengths:
        shards = manifest.shards_of(split)
        pairs = [shard_lengths(root, s, manifest.dtype, manifest.tokenizer.eot_id) for s in shards]
        starts = np.concatenate(([0], np.cumsum([s.records for s in shards]))).astype(np.int64)
        return cls(tuple(d for d, _ in pairs), tuple(f for _, f in pairs), starts)

    @property
    def records(self) -> int:
        return int(self.starts[-1])

    def documents(self, record: int) -> np.ndarray:
        """Lengths of the documents of a record (its index in the split), in order."""
        shard = int(np.searchsorted(self.starts, record, side="right")) - 1
        local = record - int(self.starts[shard])
        firsts = self.firsts[shard]
        return np.asarray(self.docs[shard][int(firsts[local]) : int(firsts[local + 1])], dtype=np.int64)
