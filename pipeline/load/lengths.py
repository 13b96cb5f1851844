"""The document lengths of every record of a split: what the global index plans batches from.

The manifest gives each shard's record and token totals, not each record's; the lengths come from
one sequential read of every shard, kept in a cache keyed by the shard's SHA-256 (from the
manifest), so a directory is scanned once per machine, whoever reads it later, and a shard
prepared again gets a fresh entry. Per shard the cache holds .npy files, opened as memory maps
(never read whole):

    SHA256-docs.npy         uint32 [documents]   tokens of each document, end-of-text id included
    SHA256-firsts.npy       int64  [records + 1] index of each record's first document; the last
                                                 entry is the shard's document count
    SHA256-offsets.npy      int64  [records + 1] tokens before each record (concat packing's
                                                 windows are found by token offset)
    SHA256-units-L.npy      int64  [records + 1] document packing's units before each record, for
                                                 rows of L tokens (`record_units`)

The last two are derived from the first two (no read of the data) the first time a packing needs
them. So the index costs 4 bytes per document and 8 to 24 per record on disk, and in memory only
the pages a step touches.
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


def entry_prefix(shard: ShardInfo, eot_id: int) -> str:
    """Where a shard's cache files are: this path, then "-docs.npy", "-firsts.npy"..."""
    return os.path.join(cache_dir(), f"eot{eot_id}", shard.sha256)


def shard_lengths(root: str, shard: ShardInfo, dtype_name: str, eot_id: int) -> tuple[np.ndarray, np.ndarray]:
    """A shard's (document lengths, first document of each record), from the cache or a scan."""
    prefix = entry_prefix(shard, eot_id)
    directory = os.path.dirname(prefix)
    docs_path, firsts_path = f"{prefix}-docs.npy", f"{prefix}-firsts.npy"
    if not (os.path.exists(docs_path) and os.path.exists(firsts_path)):
        docs, firsts = _scan(str(epath.Path(root) / shard.path), shard, numpy_dtype(dtype_name), eot_id)
        os.makedirs(directory, exist_ok=True)
        _save_atomically(docs_path, docs)
        _save_atomically(firsts_path, firsts)
    # Plain arrays over the maps: slicing a np.memmap costs several times more, once per record.
    return np.asarray(np.load(docs_path, mmap_mode="r")), np.asarray(np.load(firsts_path, mmap_mode="r"))


def record_offsets(docs: np.ndarray, firsts: np.ndarray) -> np.ndarray:
    """Tokens before each record of a shard, then the shard's token count (int64 [records + 1])."""
    ends = np.concatenate(([0], np.cumsum(docs, dtype=np.int64)))
    return ends[firsts]


def record_units(docs: np.ndarray, firsts: np.ndarray, row: int) -> np.ndarray:
    """Document packing's units before each record of a shard, then the shard's unit count (int64
    [records + 1]), for rows of `row` tokens.

    A record's documents that fit a row are one unit (they are read together); each `row`-token
    piece of a longer document is a unit of its own (`document_units`).
    """
    long = docs > row
    pieces = np.where(long, (docs.astype(np.int64) + row - 1) // row, 0)
    before_pieces = np.concatenate(([0], np.cumsum(pieces)))
    before_short = np.concatenate(([0], np.cumsum(~long, dtype=np.int64)))
    per_record = np.diff(before_pieces[firsts]) + (np.diff(before_short[firsts]) > 0)
    return np.concatenate(([0], np.cumsum(per_record))).astype(np.int64)


def _cached(prefix: str | None, name: str, derive) -> np.ndarray:
    """`derive()`, kept as PREFIX-NAME.npy beside the lengths when `prefix` names a shard's entry."""
    if prefix is None:
        return derive()
    path = f"{prefix}-{name}.npy"
    if not os.path.exists(path):
        _save_atomically(path, derive())
    return np.asarray(np.load(path, mmap_mode="r"))


@dataclasses.dataclass(frozen=True)
class SplitLengths:
    """The document lengths of a split's records, in manifest order, shard by shard.

    `cached`: each shard's cache entry (the path less its "-docs.npy"), where the arrays derived
    from the lengths are kept; empty, they are derived in memory.
    """

    docs: tuple[np.ndarray, ...]
    firsts: tuple[np.ndarray, ...]
    starts: np.ndarray  # the split's index of each shard's first record, then the record count
    cached: tuple[str, ...] = ()
    _derived: dict = dataclasses.field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def of(cls, root: str, manifest: Manifest, split: str) -> SplitLengths:
        shards = manifest.shards_of(split)
        pairs = [shard_lengths(root, s, manifest.dtype, manifest.tokenizer.eot_id) for s in shards]
        starts = np.concatenate(([0], np.cumsum([s.records for s in shards]))).astype(np.int64)
        entries = tuple(entry_prefix(s, manifest.tokenizer.eot_id) for s in shards)
        return cls(tuple(d for d, _ in pairs), tuple(f for _, f in pairs), starts, entries)

    @property
    def records(self) -> int:
        return int(self.starts[-1])

    def documents(self, record: int) -> np.ndarray:
        """Lengths of the documents of a record (its index in the split), in order."""
        shard, local = self.locate(record)
        firsts = self.firsts[shard]
        return np.asarray(self.docs[shard][int(firsts[local]) : int(firsts[local + 1])], dtype=np.int64)

    def locate(self, record: int) -> tuple[int, int]:
        """(shard, index within it) of a record of the split."""
        shard = int(np.searchsorted(self.starts, record, side="right")) - 1
        return shard, record - int(self.starts[shard])

    def _per_shard(self, name: str, derive) -> tuple[tuple[np.ndarray, ...], np.ndarray]:
        """Each shard's derived array `name` (counts before each record), and the split's counts
        before each shard then its total."""
        if name not in self._derived:
            arrays = tuple(
                _cached(self.cached[k] if self.cached else None, name, lambda k=k: derive(self.docs[k], self.firsts[k]))
                for k in range(len(self.docs))
            )
            before = np.concatenate(([0], np.cumsum([int(a[-1]) for a in arrays]))).astype(np.int64)
            self._derived[name] = arrays, before
        return self._derived[name]

    def offsets(self) -> tuple[tuple[np.ndarray, ...], np.ndarray]:
        """`record_offsets` of each shard, and the tokens before each shard then the split's total."""
        return self._per_shard("offsets", record_offsets)

    def units(self, row: int) -> tuple[tuple[np.ndarray, ...], np.ndarray]:
        """`record_units` of each shard for rows of `row` tokens, and the units before each shard
        then the split's total."""
        return self._per_shard(f"units-{row}", lambda docs, firsts: record_units(docs, firsts, row))
