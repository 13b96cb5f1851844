"""The document lengths of every record of a split: what the global index plans batches from.

The manifest gives each shard's record and token totals, not each record's; the lengths come from
one sequential read of every shard, kept in a cache keyed by the SHA-256 of the bytes that read
hashed (checked against the manifest's before anything is kept), so a directory is scanned once
per machine, whoever reads it later, and a shard prepared again gets a fresh entry. Per shard the
cache holds .npy files, opened as memory maps (never read whole):

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
    SHA256-digests.json                        each file's XXH3-128 (`file_digest`), written
                                               after them: an entry without it is unfinished
    SHA256-seen.json                           the files (path, inode, size, times) found to hold
                                               exactly these bytes

A document ends at its end-of-text id, whichever record that is in: a document longer than
`record_tokens` spans several records (schemas/records.py). The units file is derived from the
others (no read of the data) the first time document packing needs it. So the index costs 4 bytes
per document and 24 per record on disk (8 more per `seq_len` document packing is used with), and
in memory only the pages a step touches.

An entry is used for a shard only when the shard's file is there at the manifest's size, the entry
holds the manifest's documents, tokens and records for it, and that very file (by its path, inode,
size and modification times) was hashed to the entry's SHA-256: a file swapped, copied over or
edited since is hashed again first. Anything else is a one-line `LoaderError` naming the file, or,
for an entry that does not add up, a scan that replaces it.

An entry is checked against its own content too, each time it is opened: every array against the
digest written with it, as ccache checks each cache entry's XXH3-128 on reading. One that fails
(rot, a torn write, a bug in whatever wrote it) is rebuilt from the shard with one line on stderr
saying so, rather than planning batches from lengths that lie.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import hashlib
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from itertools import accumulate
from typing import BinaryIO

import numpy as np
import xxhash
from array_record.python.array_record_module import ArrayRecordReader
from etils import epath

from pipeline.dataset.integrity import repair_hint
from pipeline.load.errors import LoaderError
from schemas.manifest import Manifest, ShardInfo
from schemas.records import numpy_dtype

CACHE_ENV = "TOKSHARDS_INDEX_CACHE"
_DEFAULT_CACHE = os.path.join("~", ".cache", "tokshards", "lengths")
# The cache's layout: 4 writes each file's digest with the entry and checks it on opening; 3 keys
# an entry by the hash of the bytes it was scanned from, and its dtype; 2 took the manifest's hash
# on trust; 1 ended a document at every record's end, as records then held whole documents.
_LAYOUT = 4
_SCANNED = ("docs", "firsts", "offsets", "lead", "before")
_SCAN_BATCH = 256  # records read per call while scanning
_HASH_BLOCK = 2**20
_SEEN_KEPT = 64  # files remembered per entry (copies of a directory, the same file after a touch)
_SETTLED_SECONDS = 2.0


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


def _scan(path: str, dtype: np.dtype, eot_id: int) -> dict[str, np.ndarray]:
    """The cache's arrays for every record of a local shard file (see the module's docstring), from
    one sequential read."""
    reader = ArrayRecordReader(path)
    try:
        count = reader.num_records()
        runs, counts, sizes, lasts = [np.zeros(0, np.uint32)], [np.zeros(0, np.int64)], [], []
        for first in range(0, count, _SCAN_BATCH):
            records = [
                np.frombuffer(r, dtype) for r in reader.read(first, min(first + _SCAN_BATCH, count))
            ]
            r, c = document_lengths(
                np.concatenate(records), np.cumsum([len(r) for r in records]), eot_id
            )
            runs.append(r)
            counts.append(c)
            sizes += [len(r) for r in records]
            lasts += [int(r[-1]) if len(r) else eot_id for r in records]
    finally:
        reader.close()
    runs, counts, lasts = np.concatenate(runs), np.concatenate(counts), np.array(lasts, np.int64)
    # A record that does not end with an end-of-text id is continued by the next: its last run and
    # the next record's first are one document.
    before = np.concatenate(([-1], np.where(lasts[:-1] == eot_id, -1, lasts[:-1])))[:count]
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


def _save_atomically(path: str, array: np.ndarray) -> str:
    """Writes the array as `path` whole or not at all; the digest of the file written."""
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".npy.tmp")
    with os.fdopen(fd, "wb") as f:
        np.save(f, array)
    digest = file_digest(tmp)
    os.replace(tmp, path)
    return digest


def _load(path: str) -> np.ndarray:
    # A plain array over the map: slicing a np.memmap costs several times more, once per record.
    return np.asarray(np.load(path, mmap_mode="r"))


class DamagedEntry(LoaderError):
    """A cache entry (or one of its derived arrays) that is there but not what was written: the
    message names the file and what is wrong with it. Caught where it is found, and the entry
    rebuilt; a run error should one ever escape."""


def note(text: str) -> None:
    """One line on stderr about the cache: a damaged entry found and rebuilt is told, not hidden."""
    print(f"lengths cache: {text}", file=sys.stderr)


def file_digest(path: str) -> str:
    """XXH3-128 of a file's bytes: what an entry's digests file holds for each of its files. XXH3
    hashes at memory speed (about 40 times SHA-256 here), so an entry is checked whole each time it
    is opened for about the cost of reading it from the page cache; it finds damage (rot, a torn or
    foreign write), which is all a cache built from verified bytes needs. The file is read, not
    mapped, so the check leaves no pages in the process's memory."""
    digest = xxhash.xxh3_128()
    with open(path, "rb", buffering=0) as f:
        while block := f.read(_HASH_BLOCK):
            digest.update(block)
    return digest.hexdigest()


def _digests_path(prefix: str) -> str:
    return f"{prefix}-digests.json"


def _digests(prefix: str) -> dict[str, str]:
    """The digests written with an entry, {} where there are none (no entry, or one whose writing
    never finished: the digests are written last); a DamagedEntry where they cannot be read."""
    path = _digests_path(prefix)
    try:
        with open(path) as f:
            digests = json.load(f)
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as e:
        raise DamagedEntry(f"{path} cannot be read ({' '.join(str(e).split())[:200]})") from None
    if not isinstance(digests, dict):
        raise DamagedEntry(f"{path} does not hold digests")
    return digests


def _save_json_atomically(path: str, value: object) -> None:
    """Writes `value` as JSON at `path` whole or not at all, as `_save_atomically` does arrays."""
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".json.tmp")
    with os.fdopen(fd, "w") as f:
        json.dump(value, f, sort_keys=True)
    os.replace(tmp, path)


def _write_digests(prefix: str, digests: dict[str, str]) -> None:
    _save_json_atomically(_digests_path(prefix), digests)


def _checked_load(prefix: str, name: str, digest: str) -> np.ndarray:
    """An entry's array, its file checked whole against the digest written with it."""
    path = f"{prefix}-{name}.npy"
    try:
        found = file_digest(path)
        array = _load(path) if found == digest else None
    except (OSError, ValueError, EOFError) as e:
        raise DamagedEntry(f"{path} cannot be read ({' '.join(str(e).split())[:200]})") from None
    if array is None:
        raise DamagedEntry(f"{path} does not match the digest written with it")
    return array


def entry_prefix(sha256: str, eot_id: int, dtype_name: str) -> str:
    """Where the cache entry of a shard whose bytes hash to `sha256` is: this path, then
    "-docs.npy", "-firsts.npy"..."""
    return os.path.join(cache_dir(), f"v{_LAYOUT}-eot{eot_id}-{dtype_name}", sha256)


def read_entry(prefix: str) -> dict[str, np.ndarray] | None:
    """An entry's arrays, each checked against its digest; None where there is no entry (or its
    writing never finished), a DamagedEntry where one is there but an array does not match its
    digest or the arrays disagree in length."""
    digests = _digests(prefix)
    if not digests:
        return None
    arrays = {}
    for name in _SCANNED:
        if name not in digests:
            raise DamagedEntry(f"{_digests_path(prefix)} lacks the digest of {name}")
        arrays[name] = _checked_load(prefix, name, digests[name])
    docs, firsts, offsets = arrays["docs"], arrays["firsts"], arrays["offsets"]
    records = len(firsts) - 1
    if (
        records < 0
        or len(offsets) != records + 1
        or len(arrays["lead"]) != records
        or len(arrays["before"]) != records
        or int(firsts[-1]) != len(docs)
        or offsets[0] != 0
    ):
        raise DamagedEntry(f"the arrays of {prefix} disagree in length")
    return arrays


def _counts(arrays: dict[str, np.ndarray]) -> tuple[int, int, int]:
    """An entry's documents, tokens and records."""
    return len(arrays["docs"]), int(arrays["offsets"][-1]), len(arrays["firsts"]) - 1


def _is_local(path: epath.Path) -> bool:
    return "://" not in str(path)


@dataclasses.dataclass(frozen=True)
class _FileIdentity:
    """A file's size, and a signature that changes whenever its bytes may have: a write changes the
    modification times, a swap or a copy the inode. `settled`: changed long enough ago that a write
    within the clock's granularity after the signature was taken cannot leave it unchanged (a file
    changed just now is hashed again the next time, as git treats a racily clean file)."""

    size: int
    signature: str
    settled: bool


def _file_identity(path: epath.Path) -> _FileIdentity | None:
    """None for a missing file."""
    if _is_local(path):
        try:
            st = os.stat(path)
        except FileNotFoundError:
            return None
        size, changed = st.st_size, max(st.st_mtime_ns, st.st_ctime_ns) / 1e9
        signature = (
            f"{os.path.realpath(path)} {st.st_dev}:{st.st_ino} {size} "
            f"{st.st_mtime_ns} {st.st_ctime_ns}"
        )
    else:  # an object store's object changes as a whole, and its time with it
        if not path.exists():
            return None
        st = path.stat()
        size, changed = st.length, st.mtime
        signature = f"{path} {size} {changed}"
    return _FileIdentity(size, signature, time.time() - changed > _SETTLED_SECONDS)


def _seen(prefix: str) -> list[str]:
    try:
        with open(f"{prefix}-seen.json") as f:
            seen = json.load(f)
    except (OSError, ValueError):
        return []
    return seen if isinstance(seen, list) else []


def _remember(prefix: str, signature: str) -> None:
    """Records that the file of this signature holds the entry's bytes (the latest few are kept)."""
    seen = [s for s in _seen(prefix) if s != signature][-(_SEEN_KEPT - 1) :] + [signature]
    _save_json_atomically(f"{prefix}-seen.json", seen)


def _sha256(path: epath.Path, copy_to: BinaryIO | None = None) -> str:
    """SHA-256 of a file's bytes, read in blocks (and written on to `copy_to` as they come)."""
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(_HASH_BLOCK):
            digest.update(block)
            if copy_to is not None:
                copy_to.write(block)
    return digest.hexdigest()


class DamagedShard(LoaderError):
    """A shard that is not what its manifest says; `what` says how, the message adds the file and
    the fix."""

    def __init__(self, root: str, path: epath.Path, what: str):
        super().__init__(f"{path} {what}; {repair_hint(root)}")
        self.what = what


def _check_bytes(root: str, path: epath.Path, sha256: str, shard: ShardInfo) -> None:
    if sha256 != shard.sha256:
        raise DamagedShard(
            root,
            path,
            f"does not hold the bytes its manifest names (sha256 {sha256[:12]}..., the "
            f"manifest says {shard.sha256[:12]}...)",
        )


def _scanned(
    root: str, path: epath.Path, shard: ShardInfo, dtype_name: str, eot_id: int
) -> dict[str, np.ndarray]:
    """A fresh entry for the shard, kept only when the bytes scanned are the ones the manifest
    names. A local shard is hashed on another thread while it is scanned (hashlib lets go of the
    interpreter, and the page cache serves both reads); a remote one is hashed on its way to a
    temporary file, which is scanned."""
    dtype = numpy_dtype(dtype_name)
    with contextlib.ExitStack() as stack:
        if _is_local(path):
            pool = stack.enter_context(concurrent.futures.ThreadPoolExecutor(1))
            hashing, local = pool.submit(_sha256, path), str(path)
        else:
            copy = stack.enter_context(tempfile.NamedTemporaryFile(prefix=".lengths-scan-"))
            hashing, local = concurrent.futures.Future(), copy.name
            hashing.set_result(_sha256(path, copy_to=copy))
            copy.flush()
        try:
            arrays, error = _scan(local, dtype, eot_id), None
        except (
            RuntimeError,
            OSError,
            ValueError,
        ) as e:  # ArrayRecord's, numpy's for a record of odd length
            arrays, error = None, e
        _check_bytes(root, path, hashing.result(), shard)
    if arrays is None:
        raise DamagedShard(
            root,
            path,
            f"cannot be read as records of {dtype_name} token ids "
            f"({' '.join(str(error).split())[:200]})",
        )
    write_entry(entry_prefix(shard.sha256, eot_id, dtype_name), arrays)
    return arrays


def write_entry(prefix: str, arrays: dict[str, np.ndarray]) -> None:
    """Writes a shard's scanned arrays as the entry `prefix`, then their digests: the entry is
    complete once they are there (derived arrays' digests join them later)."""
    os.makedirs(os.path.dirname(prefix), exist_ok=True)
    _write_digests(
        prefix, {name: _save_atomically(f"{prefix}-{name}.npy", arrays[name]) for name in _SCANNED}
    )


def shard_lengths(
    root: str, shard: ShardInfo, dtype_name: str, eot_id: int, *, rescan: bool = False
) -> dict[str, np.ndarray]:
    """A shard's arrays (see the module's docstring, the units excepted), from the cache or a scan
    (always a scan with `rescan`, which renews the entry: `verify` reads every shard); a
    DamagedShard naming the file where it is missing, of another size, of other bytes, or holds
    other counts than the manifest says. A damaged entry is rebuilt, and said so on stderr."""
    path = epath.Path(root) / shard.path
    identity = _file_identity(path)
    if identity is None:
        raise DamagedShard(root, path, "is missing (the manifest lists it)")
    if identity.size != shard.bytes:
        raise DamagedShard(root, path, f"is {identity.size} bytes, the manifest says {shard.bytes}")
    prefix = entry_prefix(shard.sha256, eot_id, dtype_name)
    try:
        arrays = None if rescan else read_entry(prefix)
    except DamagedEntry as e:
        note(f"{e}; rebuilding the entry from {path}")
        arrays = None
    seen = arrays is not None and identity.signature in _seen(prefix)
    if arrays is not None and not seen:
        _check_bytes(root, path, _sha256(path), shard)
    expected = (shard.documents, shard.tokens, shard.records)
    if arrays is None or _counts(arrays) != expected:
        arrays = _scanned(root, path, shard, dtype_name, eot_id)
    if _counts(arrays) != expected:
        documents, tokens, records = _counts(arrays)
        raise DamagedShard(
            root,
            path,
            f"holds {documents} documents and {tokens} tokens in {records} records, its "
            f"manifest says {shard.documents}, {shard.tokens} and {shard.records}: the "
            "manifest is not this directory's, or was edited",
        )
    if not seen and identity.settled:
        _remember(prefix, identity.signature)
    return arrays


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


def _cached(
    prefix: str | None, name: str, derive: Callable[[], np.ndarray], length: int
) -> np.ndarray:
    """`derive()` (`length` values), kept as PREFIX-NAME.npy beside the lengths when `prefix` names
    a shard's entry, its digest added to the entry's; a kept file that does not match its digest or
    is not of that length is derived again (and said so). Two processes deriving at once may each
    write the digests: one that is lost costs a derivation the next time, not a wrong array."""
    if prefix is None:
        return derive()
    path = f"{prefix}-{name}.npy"
    try:
        digests = _digests(prefix)
        if name in digests:
            kept = _checked_load(prefix, name, digests[name])
            if len(kept) == length:
                return kept
            raise DamagedEntry(f"{path} holds {len(kept)} values, not {length}")
    except DamagedEntry as e:
        note(f"{e}; deriving it again")
        digests = {}
    array = derive()
    digest = _save_atomically(path, array)
    _write_digests(prefix, {**digests, name: digest})
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
            shards,
            [shard_lengths(root, s, manifest.dtype, eot) for s in shards],
            [entry_prefix(s.sha256, eot, manifest.dtype) for s in shards],
        )

    @classmethod
    def of_shards(
        cls,
        shards: Sequence[ShardInfo],
        arrays: Sequence[dict[str, np.ndarray]],
        cached: Sequence[str],
    ) -> SplitLengths:
        """The split of these shards, from each one's `shard_lengths` and cache entry
        (`entry_prefix`)."""
        starts = np.concatenate(([0], np.cumsum([s.records for s in shards]))).astype(np.int64)
        column = lambda name: tuple(a[name] for a in arrays)  # noqa: E731
        return cls(
            column("docs"),
            column("firsts"),
            starts,
            column("offsets"),
            column("lead"),
            column("before"),
            tuple(cached),
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
                _cached(
                    self.cached[k] if self.cached else None,
                    name,
                    lambda k=k: derive(k),
                    len(self.firsts[k]),
                )
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
