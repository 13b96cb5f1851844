"""The document lengths of every record of a split: what the global index plans batches from.

The manifest gives each shard's record and token totals, not each record's; the lengths come from
one sequential read of every shard, kept in a cache keyed by the shard's SHA-256 (from the
manifest), so a directory is scanned once per machine, whoever reads it later, and a shard
prepared again gets a fresh entry. Per shard the cache holds .npy files, opened as memory maps
(never read whole):

    SHA256-docs.npy       uint32 [documents]   tokens of each document, end-of-text id included
    SHA256-firsts.npy     int64  [records + 1] index of the first document that starts in each
                                               record; the last entry is the document count
    SHA256-offsets.npy    int64  [records + 1] tokens before each record, then the shard's
    SHA256-lead.npy       int32  [records]     tokens a record begins with that continue a
                                               document started in an earlier record (0 if none)
    SHA256-before.npy     int32  [records]     the token before each record's first, where the
                                               record continues a document; -1 where it starts one
    SHA256-units-L.npy    int64  [records + 1] document packing's units before each record, for
                                               rows of L tokens (`record_units`)

A document ends at its end-of-text id, whichever record that is in: a document longer than
`record_tokens` spans several records (schemas/records.py). The units file is derived from the
others (no read of the data) the first time document packing needs it. So the index costs 4 bytes
per document and 24 per record on disk (8 more per `seq_len` document packing is used with), and
in memory only the pages a step touches.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
from collections.abc import Callable, Sequence
from itertools import accumulate

import grain
import numpy as np
from etils import epath

from schemas.manifest import Manifest, ShardInfo
from schemas.records import numpy_dtype

CACHE_ENV = "TOKSHARDS_INDEX_CACHE"
_DEFAULT_CACHE = os.path.join("~", ".cache", "tokshards", "lengths")
# The cache's layout: 1 ended a document at every record's end, as records then held whole
# documents.
_LAYOUT = 2
_SCANNED = ("docs", "firsts", "offsets", "lead", "before")
_SCAN_BATCH = 256  # records read per call while scanning


def cache_dir() -> str:
    """Where lengths are cached: $TOKSHARDS_INDEX_CACHE, or ~/.cache/tokshards/lengths."""
    return os.path.expanduser(os.environ.get(CACHE_ENV) or _DEFAULT_CACHE)


def document_lengths(
    tokens: np.ndarray, ends: np.ndarray, eot_id: int
) -> tuple[np.ndarray, np.ndarray]:
    """Lengths of the runs of records joined in `tokens` (record `i` ends at `ends[i]`), and how
    many runs each record holds. A run ends after each end-of-text id, and at its record's end."""
    stops = np.union1d(np.flatnonzero(tokens == eot_id) + 1, ends)
    counts = np.diff(np.searchsorted(stops, ends, side="right"), prepend=0)
    return np.diff(stops, prepend=0).astype(np.uint32), counts


def _scan(path: str, shard: ShardInfo, dtype: np.dtype, eot_id: int) -> dict[str, np.ndarray]:
    """The cache's arrays for one shard (see the module's docstring), from one sequential read."""
    source = grain.sources.ArrayRecordDataSource([f"{path}[0:{shard.records}]"])
    runs, counts, sizes, lasts = [], [], [], []
    for first in range(0, shard.records, _SCAN_BATCH):
        records = [
            np.frombuffer(r, dtype)
            for r in source.__getitems__(range(first, min(first + _SCAN_BATCH, shard.records)))
        ]
        r, c = document_lengths(
            np.concatenate(records), np.cumsum([len(r) for r in records]), eot_id
        )
        runs.append(r)
        counts.append(c)
        sizes += [len(r) for r in records]
        lasts += [int(r[-1]) if len(r) else eot_id for r in records]
    runs, counts, lasts = np.concatenate(runs), np.concatenate(counts), np.array(lasts, np.int64)
    # A record that does not end with an end-of-text id is continued by the next: its last run and
    # the next record's first are one document.
    before = np.concatenate(([-1], np.where(lasts[:-1] == eot_id, -1, lasts[:-1])))
    first_runs = np.concatenate(([0], np.cumsum(counts)))
    joined = np.zeros(len(runs), bool)
    joined[first_runs[:-1][before >= 0]] = True  # a run that continues the run before it
    heads = np.flatnonzero(~joined)
    docs = np.add.reduceat(runs.astype(np.int64), heads).astype(np.uint32) if len(heads) else runs
    document_of_run = np.cumsum(~joined) - 1
    firsts = np.append(
        document_of_run[first_runs[:-1]] + joined[first_runs[:-1]], len(docs)
    ).astype(np.int64)
    return {
        "docs": docs,
        "firsts": firsts,
        "offsets": np.concatenate(([0], np.cumsum(sizes))).astype(np.int64),
        "lead": np.where(before >= 0, runs[first_runs[:-1]], 0).astype(np.int32),
        "before": before.astype(np.int32),
    }


def _save_atomically(path: str, array: np.ndarray) -> None:
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".npy.tmp")
    with os.fdopen(fd, "wb") as f:
        np.save(f, array)
    os.replace(tmp, path)


def _load(path: str) -> np.ndarray:
    # A plain array over the map: slicing a np.memmap costs several times more, once per record.
    return np.asarray(np.load(path, mmap_mode="r"))


def entry_prefix(shard: ShardInfo, eot_id: int) -> str:
    """Where a shard's cache files are: this path, then "-docs.npy", "-firsts.npy"..."""
    return os.path.join(cache_dir(), f"v{_LAYOUT}-eot{eot_id}", shard.sha256)


def shard_lengths(
    root: str, shard: ShardInfo, dtype_name: str, eot_id: int
) -> dict[str, np.ndarray]:
    """A shard's arrays (see the module's docstring, the units excepted), from the cache or a
    scan."""
    prefix = entry_prefix(shard, eot_id)
    paths = {name: f"{prefix}-{name}.npy" for name in _SCANNED}
    if not all(os.path.exists(p) for p in paths.values()):
        arrays = _scan(str(epath.Path(root) / shard.path), shard, numpy_dtype(dtype_name), eot_id)
        os.makedirs(os.path.dirname(prefix), exist_ok=True)
        for name, path in paths.items():
            _save_atomically(path, arrays[name])
    return {name: _load(path) for name, path in paths.items()}


def record_offsets(docs: np.ndarray, firsts: np.ndarray) -> np.ndarray:
    """Tokens before each record of a shard whose records hold whole documents, then the shard's
    token count (int64 [records + 1])."""
    ends = np.concatenate(([0], np.cumsum(docs, dtype=np.int64)))
    return ends[firsts]


def record_units(docs: np.ndarray, firsts: np.ndarray, row: int) -> np.ndarray:
    """Document packing's units before each record of a shard, then the shard's unit count (int64
    [records + 1]), for rows of `row` tokens.

    The documents that start in a record and fit a row are one unit (they are read together); each
    `row`-token piece of a longer document is a unit of its own (`document_units`).
    """
    long = docs > row
    pieces = np.where(long, (docs.astype(np.int64) + row - 1) // row, 0)
    before_pieces = np.concatenate(([0], np.cumsum(pieces)))
    before_short = np.concatenate(([0], np.cumsum(~long, dtype=np.int64)))
    per_record = np.diff(before_pieces[firsts]) + (np.diff(before_short[firsts]) > 0)
    return np.concatenate(([0], np.cumsum(per_record))).astype(np.int64)


def _cached(prefix: str | None, name: str, derive: Callable[[], np.ndarray]) -> np.ndarray:
    """`derive()`, kept as PREFIX-NAME.npy beside the lengths when `prefix` names a shard's
    entry."""
    if prefix is None:
        return derive()
    path = f"{prefix}-{name}.npy"
    if not os.path.exists(path):
        _save_atomically(path, derive())
    return _load(path)


@dataclasses.dataclass(frozen=True)
class SplitLengths:
    """The document lengths of a split's records, in manifest order, shard by shard.

    `offsets`, `lead` and `before` (per shard, see the module's docstring) may be left empty for
    records that all hold whole documents. `cached`: each shard's cache entry (the path less its
    "-docs.npy"), where the arrays derived from the lengths are kept; empty, they are derived in
    memory.
    """

    docs: tuple[np.ndarray, ...]
    firsts: tuple[np.ndarray, ...]
    starts: np.ndarray  # the split's index of each shard's first record, then the record count
    offsets_of: tuple[np.ndarray, ...] = ()
    lead: tuple[np.ndarray, ...] = ()
    before: tuple[np.ndarray, ...] = ()
    cached: tuple[str, ...] = ()
    _derived: dict = dataclasses.field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def of(cls, root: str, manifest: Manifest, split: str) -> SplitLengths:
        shards = manifest.shards_of(split)
        eot = manifest.tokenizer.eot_id
        return cls.of_shards(
            shards, [shard_lengths(root, s, manifest.dtype, eot) for s in shards], eot
        )

    @classmethod
    def of_shards(
        cls, shards: Sequence[ShardInfo], arrays: Sequence[dict[str, np.ndarray]], eot_id: int
    ) -> SplitLengths:
        """The split of these shards, from each one's `shard_lengths`."""
        starts = np.concatenate(([0], np.cumsum([s.records for s in shards]))).astype(np.int64)
        column = lambda name: tuple(a[name] for a in arrays)  # noqa: E731
        return cls(
            column("docs"),
            column("firsts"),
            starts,
            column("offsets"),
            column("lead"),
            column("before"),
            tuple(entry_prefix(s, eot_id) for s in shards),
        )

    @property
    def records(self) -> int:
        return int(self.starts[-1])

    def tokens_before(self, records: np.ndarray) -> np.ndarray:
        """The token before each record's first where the record continues a document, else -1."""
        out = np.full(len(records), -1, np.int64)
        if self.before:
            for shard, idx in by_shard(records, self.starts):
                out[idx] = self.before[shard][records[idx] - self.starts[shard]]
        return out

    def _per_shard(
        self, name: str, derive: Callable[[int], np.ndarray]
    ) -> tuple[tuple[np.ndarray, ...], np.ndarray]:
        """Each shard's array `name` (counts before each record, from `derive(shard)`), and the
        split's counts before each shard then its total (int64)."""
        if name not in self._derived:
            arrays = tuple(
                _cached(self.cached[k] if self.cached else None, name, lambda k=k: derive(k))
                for k in range(len(self.docs))
            )
            self._derived[name] = (
                arrays,
                np.array([0, *accumulate(int(a[-1]) for a in arrays)], np.int64),
            )
        return self._derived[name]

    def offsets(self) -> tuple[tuple[np.ndarray, ...], np.ndarray]:
        """Tokens before each record of each shard, and the tokens before each shard then the
        split's total."""
        if self.offsets_of:
            return self._per_shard("offsets", lambda k: self.offsets_of[k])
        return self._per_shard("offsets", lambda k: record_offsets(self.docs[k], self.firsts[k]))

    def units(self, row: int) -> tuple[tuple[np.ndarray, ...], np.ndarray]:
        """`record_units` of each shard for rows of `row` tokens, and the units before each shard
        then the split's total."""
        return self._per_shard(
            f"units-{row}", lambda k: record_units(self.docs[k], self.firsts[k], row)
        )

    def runs(
        self, at: np.ndarray, length: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Each record's part of the split's tokens [at[i], at[i] + length[i]) for every i, as
        arrays (i, record, token offset in it, tokens), ordered by i and then by position."""
        offsets, before = self.offsets()
        which, at, length = (
            np.arange(len(at)),
            np.asarray(at, np.int64),
            np.asarray(length, np.int64),
        )
        cut: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        while len(which):  # cut where a shard ends (a window of the split's stream may run on)
            take = np.minimum(length, before[np.searchsorted(before, at, side="right")] - at)
            cut.append((which, at, take))
            more = take < length
            which, at, length = which[more], at[more] + take[more], length[more] - take[more]
        which, at, length = (np.concatenate(c) for c in zip(*cut)) if len(cut) > 1 else cut[0]
        parts = []
        for shard, idx in by_shard(at, before):
            shard_offsets = offsets[shard]
            begin = at[idx] - before[shard]
            end = begin + length[idx]
            first = shard_offsets.searchsorted(begin, side="right") - 1
            count = shard_offsets.searchsorted(end - 1, side="right") - first
            if count.max() > 1:  # a run over several records: one part per record
                run = np.repeat(np.arange(len(idx)), count)
                record = (
                    first[run] + np.arange(len(run)) - np.repeat(np.cumsum(count) - count, count)
                )
                idx, begin, end, first = idx[run], begin[run], end[run], record
            record_begin = shard_offsets[first]
            begin = np.maximum(begin, record_begin)
            end = np.minimum(end, shard_offsets[first + 1])
            parts.append(
                (which[idx], self.starts[shard] + first, begin - record_begin, end - begin)
            )
        which, record, start, length = (
            (np.concatenate(c) for c in zip(*parts)) if len(parts) > 1 else parts[0]
        )
        keep = length > 0  # an empty record inside a run
        order = np.lexsort((record[keep], which[keep]))
        return which[keep][order], record[keep][order], start[keep][order], length[keep][order]


def by_shard(values: np.ndarray, before: np.ndarray) -> list[tuple[int, np.ndarray]]:
    """Where values counted over a split (records, tokens or units, `before` each shard, then the
    total) lie: each shard that holds some, with the indices of those values."""
    shard = np.searchsorted(before, values, side="right") - 1
    if not len(shard):
        return []
    low, high = int(shard.min()), int(shard.max())
    if low == high:
        return [(low, np.arange(len(shard)))]
    order = np.argsort(shard, kind="stable")
    groups = np.split(order, np.flatnonzero(np.diff(shard[order])) + 1)
    return [(int(shard[group[0]]), group) for group in groups]
