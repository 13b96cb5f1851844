"""Deterministic per-host training batches from a prepared directory, as a Grain pipeline.

    ArrayRecordDataSource (every shard of the split, manifest order)
    -> global shuffle per epoch, host i takes every n-th record   (host_sharding)
    -> runs of 32 consecutive records joined into chunks          (in the prefetch workers)
    -> concat or document packing into [host_batch, seq_len]       (packing, main process)

The batches depend on the data, the seed, `seq_len`, the global batch size, the packing and the
process layout; never on `worker_count`. The iterator's state is a few integers (JSON), so it fits
`grain.checkpoint.CheckpointSave` in an Orbax CheckpointManager, and a restored iterator yields
exactly the batches the uninterrupted one would have. A state restores only into an iterator of
the same config, `worker_count` included (its shape records the prefetch workers).
"""

from __future__ import annotations

import dataclasses
import math

import grain
from etils import epath

from pipeline.integrity import shard_problems
from pipeline.load.host_sharding import host_records, resolve_process
from pipeline.load.packing import ConcatPackIterDataset, DocumentPackIterDataset, JoinRecords
from schemas import formats
from schemas.manifest import Manifest, ManifestError

PACKINGS = ("concat", "document")
# Token ids leave the loader as int32 (what embedding lookups take).
MAX_VOCAB = 2**31
# Read-ahead of chunks (in each prefetch worker, or in the main process without workers): enough to
# hide reads behind packing, little memory.
_READ_OPTIONS = grain.ReadOptions(num_threads=2, prefetch_buffer_size=4)
# Records per chunk handed from a prefetch worker to the packer. Each hand-off costs a shared-memory
# block and queue round trip (~0.1-0.5 ms), so chunks hold many records: 32 of 8k tokens, a quarter
# of a million tokens, measured 1.6x faster than one batch per chunk with 2 workers on 2 cores.
# Batches do not depend on it: the packers join chunks.
_CHUNK_RECORDS = 32
_WORKER_BUFFER = 4


class LoaderError(ValueError):
    """A prepared directory or a loader config that cannot work; the message says how to fix it."""


@dataclasses.dataclass(frozen=True)
class LoaderConfig:
    """What decides a host's batches, and how they are fetched.

    `packing`: "concat" (windows of the token stream) or "document" (whole documents per row, with
    segment ids and positions). `num_epochs`: None repeats forever. `worker_count`: prefetch
    processes. `process_index`/`process_count`: None takes them from JAX. `verify`: re-hash every
    shard against the manifest when opening (reads all the data once).
    """

    data_dir: str
    split: str = "train"
    seq_len: int = 1024
    global_batch_size: int = 16
    seed: int = 0
    packing: str = "concat"
    num_epochs: int | None = None
    worker_count: int = 0
    process_index: int | None = None
    process_count: int | None = None
    verify: bool = False

    def __post_init__(self) -> None:
        if self.split not in formats.SPLITS:
            raise LoaderError(f"unknown split {self.split!r}; expected one of {formats.SPLITS}")
        if self.seq_len < 1:
            raise LoaderError(f"seq_len must be at least 1 (got {self.seq_len=})")
        if self.global_batch_size < 1:
            raise LoaderError(f"global_batch_size must be at least 1 (got {self.global_batch_size=})")
        if self.seed < 0:
            raise LoaderError(f"seed must be non-negative (got {self.seed=})")
        if self.packing not in PACKINGS:
            raise LoaderError(f"unknown packing {self.packing!r}; expected one of {PACKINGS}")
        if self.num_epochs is not None and self.num_epochs < 1:
            raise LoaderError(f"num_epochs must be at least 1, or None to repeat (got {self.num_epochs=})")
        if self.worker_count < 0:
            raise LoaderError(f"worker_count must be non-negative (got {self.worker_count=})")
        if self.process_count is not None and self.process_count < 1:
            raise LoaderError(f"process_count must be at least 1 (got {self.process_count=})")
        if self.process_index is not None and self.process_index < 0:
            raise LoaderError(f"process_index must be non-negative (got {self.process_index=})")


def open_prepared(data_dir: str, *, verify: bool = False) -> Manifest:
    """The validated manifest of a prepared directory whose shards are all present.

    Sizes are always checked (one stat per shard) so that a truncated copy fails here, not in the
    middle of training; hashes only with `verify`, since that reads every byte.
    """
    root = epath.Path(data_dir)
    path = root / formats.MANIFEST_NAME
    if not path.exists():
        raise LoaderError(
            f"{data_dir} has no {formats.MANIFEST_NAME}; point the loader at the output directory "
            "of a finished `python -m pipeline prepare` run"
        )
    try:
        manifest = Manifest.from_json(path.read_text())
    except (ManifestError, ValueError) as e:
        raise LoaderError(f"{path}: {e}") from None
    if manifest.tokenizer.n_vocab > MAX_VOCAB:
        raise LoaderError(f"vocabulary of {manifest.tokenizer.n_vocab} ids does not fit int32 batches")
    def size_of(relative: str) -> int | None:
        shard_path = root / relative
        return shard_path.stat().length if shard_path.exists() else None

    problem = next(
        shard_problems(manifest.shards, size_of=size_of, open_binary=lambda p: (root / p).open("rb"), hashes=verify),
        None,
    )
    if problem is not None:
        raise LoaderError(
            f"{problem} (listed in {path}): the copy is incomplete or the directory was modified; "
            "copy or prepare it again"
        )
    return manifest


def host_batch_size(config: LoaderConfig) -> int:
    """Rows of each batch this process gets: the global batch split evenly over processes."""
    _, count = _process(config)
    if config.global_batch_size % count:
        raise LoaderError(
            f"global_batch_size {config.global_batch_size} is not divisible by the "
            f"{count} processes; use a multiple of {count}"
        )
    return config.global_batch_size // count


def _process(config: LoaderConfig) -> tuple[int, int]:
    try:
        return resolve_process(config.process_index, config.process_count)
    except ValueError as e:
        raise LoaderError(str(e)) from None


def make_dataset(config: LoaderConfig) -> grain.IterDataset:
    """This host's batches: dicts of int32 arrays [host_batch, seq_len].

    Always "inputs" and "targets"; with document packing also "segment_ids" and "positions".
    """
    manifest = open_prepared(config.data_dir, verify=config.verify)
    shards = manifest.shards_of(config.split)
    if not shards:
        present = sorted({s.split for s in manifest.shards})
        raise LoaderError(
            f"{config.data_dir} has no {config.split!r} split (it has {present}); "
            "choose one of those or prepare with --validation-fraction"
        )
    index, count = _process(config)
    rows = host_batch_size(config)
    row_tokens = config.seq_len + 1 if config.packing == "concat" else config.seq_len
    split_tokens = sum(s.tokens for s in shards)
    if config.num_epochs is not None and split_tokens * config.num_epochs < config.global_batch_size * row_tokens:
        raise LoaderError(
            f"the {config.split!r} split has {split_tokens} tokens, fewer than one global batch of "
            f"{config.global_batch_size} x {row_tokens} over {config.num_epochs} epoch(s); "
            "lower seq_len or global_batch_size, or raise num_epochs"
        )
    root = epath.Path(config.data_dir)
    # "path[start:end]" tells the source each shard's record count, so it opens no file up front.
    source = grain.sources.ArrayRecordDataSource([f"{root / s.path}[0:{s.records}]" for s in shards])
    try:
        records = host_records(
            grain.MapDataset.source(source),
            seed=config.seed,
            process_index=index,
            process_count=count,
        )
    except ValueError as e:
        raise LoaderError(str(e)) from None
    # Chunked before repeating: an infinite MapDataset cannot be batched, and a chunk never spans
    # two epochs (the packers join chunks anyway).
    records_per_chunk = max(_CHUNK_RECORDS, math.ceil(rows * row_tokens / manifest.config.record_tokens))
    chunks = records.batch(records_per_chunk, batch_fn=JoinRecords(manifest.dtype)).repeat(config.num_epochs)
    ds = chunks.to_iter_dataset(_READ_OPTIONS)
    if config.worker_count:
        _allow_unparsed_absl_flags()
        options = grain.MultiprocessingOptions(num_workers=config.worker_count, per_worker_buffer_size=_WORKER_BUFFER)
        ds = ds.mp_prefetch(options)
    if config.packing == "concat":
        return ConcatPackIterDataset(ds, rows=rows, seq_len=config.seq_len)
    return DocumentPackIterDataset(ds, rows=rows, seq_len=config.seq_len, eot_id=manifest.tokenizer.eot_id)


def _allow_unparsed_absl_flags() -> None:
    """Lets Grain's multiprocess prefetch run in programs that do not parse absl flags.

    Grain 0.2.18 reads an absl flag when it starts workers and fails if flags were never parsed,
    as in any script not started through `absl.app` (google/grain#1355, fixed upstream). Marking
    them parsed keeps every flag at its default; a program that parses its flags is left alone.
    """
    from absl import flags

    if not flags.FLAGS.is_parsed():
        flags.FLAGS.mark_as_parsed()


def make_iterator(config: LoaderConfig) -> grain.DatasetIterator:
    """A checkpointable iterator over `make_dataset(config)`; call `close()` when done with it."""
    return iter(make_dataset(config))
