"""Deterministic per-host training batches from prepared directories, as a Grain pipeline.

    ArrayRecordDataSource per source (every shard of the split, manifest order)
    -> global shuffle per epoch, part i of n takes every n-th record  (host_sharding)
    -> sources mixed record by record in token shares                 (mixture; one source: as is)
    -> runs of 32 consecutive records joined into chunks              (chunks, in the prefetch workers)
    -> concat or document packing into [host_batch, seq_len]          (packing, main process)

The batches depend on the data, the seed, `seq_len`, the global batch size, the packing and the
shard layout; never on `worker_count`. The iterator's state is a few integers (JSON): the index of
a chunk and an offset into it. It fits `grain.checkpoint.CheckpointSave` in an Orbax
CheckpointManager, and a restored iterator yields exactly the batches the uninterrupted one would
have, with any `worker_count`. A state restores only into an iterator of the same config otherwise.
"""

from __future__ import annotations

import dataclasses
import math

import grain
from etils import epath

from pipeline.integrity import shard_problems
from pipeline.load.chunks import ChunkStreamIterDataset, JoinRecords, TagSource
from pipeline.load.data_spec import DataSource, check_names
from pipeline.load.errors import LoaderError
from pipeline.load.host_sharding import host_records, resolve_shard
from pipeline.load.mixture import check_compatible, record_proportions
from pipeline.load.packing import ConcatPackIterDataset, DocumentPackIterDataset
from schemas import formats
from schemas.manifest import Manifest, ManifestError

PACKINGS = ("concat", "document")
# Token ids leave the loader as int32 (what embedding lookups take).
MAX_VOCAB = 2**31
# Records per chunk handed from a prefetch worker to the packer. Each hand-off costs a shared-memory
# block and queue round trip (~0.1-0.5 ms), so chunks hold many records: 32 of 8k tokens, a quarter
# of a million tokens, measured 1.6x faster than one batch per chunk with 2 workers on 2 cores.
# Batches do not depend on it: the packers join chunks.
_CHUNK_RECORDS = 32


@dataclasses.dataclass(frozen=True)
class LoaderConfig:
    """What decides a host's batches, and how they are fetched.

    `data`: one prepared directory, or the sources of a mixture (`parse_data_spec`); a mixture of
    more than one source adds "source_tokens" to every batch. `packing`: "concat" (windows of the
    token stream) or "document" (whole documents per row, with segment ids and positions).
    `num_epochs`: None repeats forever (for a mixture's epoch see `pipeline.load.mixture`).
    `worker_count`: prefetch processes. `shard_index`/`shard_count`: which of `shard_count` equal
    parts of the global batch this process feeds; processes that share a position on the mesh's
    data axis pass the same index, and get identical batches. None takes them from JAX's process
    index and count. `verify`: re-hash every shard against its manifest when opening (reads all
    the data once).
    """

    data: str | tuple[DataSource, ...]
    split: str = "train"
    seq_len: int = 1024
    global_batch_size: int = 16
    seed: int = 0
    packing: str = "concat"
    num_epochs: int | None = None
    worker_count: int = 0
    shard_index: int | None = None
    shard_count: int | None = None
    verify: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.data, str):
            if not self.data:
                raise LoaderError("data must name a prepared directory (got an empty string)")
        elif isinstance(self.data, tuple) and all(isinstance(s, DataSource) for s in self.data):
            check_names(self.data)
        else:
            raise LoaderError(
                f"data must be a directory or a tuple of DataSource, as parse_data_spec returns (got {self.data!r})"
            )
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
        if self.shard_count is not None and self.shard_count < 1:
            raise LoaderError(f"shard_count must be at least 1 (got {self.shard_count=})")
        if self.shard_index is not None and self.shard_index < 0:
            raise LoaderError(f"shard_index must be non-negative (got {self.shard_index=})")

    @property
    def sources(self) -> tuple[DataSource, ...]:
        """The sources in mixture order; a lone directory is one source of weight 1."""
        return (DataSource.directory(self.data),) if isinstance(self.data, str) else self.data

    @property
    def source_names(self) -> tuple[str, ...]:
        """Names in the order of "source_tokens"."""
        return tuple(s.name for s in self.sources)


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


def open_sources(sources: tuple[DataSource, ...], *, verify: bool = False) -> tuple[Manifest, ...]:
    """`open_prepared` for every source, in order, refusing sources that do not share one tokenizer."""
    manifests = tuple(open_prepared(s.path, verify=verify) for s in sources)
    check_compatible([s.name for s in sources], manifests)
    return manifests


def host_batch_size(config: LoaderConfig) -> int:
    """Rows of each batch this process gets: global_batch_size / shard_count."""
    _, count = _shard(config)
    if config.global_batch_size % count:
        raise LoaderError(
            f"global_batch_size {config.global_batch_size} is not divisible by the "
            f"{count} parts of the global batch (shard_count); use a multiple of {count}"
        )
    return config.global_batch_size // count


def _shard(config: LoaderConfig) -> tuple[int, int]:
    try:
        return resolve_shard(config.shard_index, config.shard_count)
    except ValueError as e:
        raise LoaderError(str(e)) from None


def make_chunks(config: LoaderConfig) -> grain.IterDataset:
    """The chunk stream the packers of `make_dataset(config)` consume (for tools comparing packers)."""
    return _chunk_stream(config, open_sources(config.sources, verify=config.verify))


def _source_records(
    config: LoaderConfig, position: int, manifest: Manifest, shard: tuple[int, int]
) -> tuple[grain.MapDataset, float]:
    """This part's records of the source at `position`, tagged with it; and its tokens per record."""
    source = config.sources[position]
    shards = manifest.shards_of(config.split)
    if not shards:
        present = sorted({s.split for s in manifest.shards})
        raise LoaderError(
            f"{source.path} has no {config.split!r} split (it has {present}); "
            "choose one of those or prepare with --validation-fraction"
        )
    root = epath.Path(source.path)
    # "path[start:end]" tells the source each shard's record count, so it opens no file up front.
    records = grain.MapDataset.source(
        grain.sources.ArrayRecordDataSource([f"{root / s.path}[0:{s.records}]" for s in shards])
    )
    index, count = shard
    try:
        part = host_records(records, seed=config.seed, shard_index=index, shard_count=count, source=position)
    except ValueError as e:
        raise LoaderError(f"{source.path}: {e}") from None
    return part.map(TagSource(position)), sum(s.tokens for s in shards) / sum(s.records for s in shards)


def _chunk_stream(config: LoaderConfig, manifests: tuple[Manifest, ...]) -> grain.IterDataset:
    shard = _shard(config)
    rows = host_batch_size(config)
    parts, tokens_per_record = zip(*(_source_records(config, i, m, shard) for i, m in enumerate(manifests)))
    proportions = record_proportions([s.weight for s in config.sources], tokens_per_record)
    records = parts[0] if len(parts) == 1 else grain.MapDataset.mix(parts, proportions)
    row_tokens = config.seq_len + 1 if config.packing == "concat" else config.seq_len
    # All parts together read about this many tokens per epoch.
    epoch_tokens = round(len(records) * shard[1] * sum(p * t for p, t in zip(proportions, tokens_per_record)))
    if config.num_epochs is not None and epoch_tokens * config.num_epochs < config.global_batch_size * row_tokens:
        raise LoaderError(
            f"an epoch of the {config.split!r} split holds about {epoch_tokens} tokens, fewer than one global "
            f"batch of {config.global_batch_size} x {row_tokens} over {config.num_epochs} epoch(s); "
            "lower seq_len or global_batch_size, or raise num_epochs"
        )
    record_tokens = min(m.config.record_tokens for m in manifests)
    records_per_chunk = max(_CHUNK_RECORDS, math.ceil(rows * row_tokens / record_tokens))
    # Chunked before repeating: an infinite MapDataset cannot be batched, and a chunk never spans
    # two epochs (the packers join chunks anyway).
    chunks = records.batch(records_per_chunk, batch_fn=JoinRecords(manifests[0].dtype)).repeat(config.num_epochs)
    return ChunkStreamIterDataset(chunks, worker_count=config.worker_count)


def make_dataset(config: LoaderConfig) -> grain.IterDataset:
    """This host's batches: dicts of int32 arrays [host_batch, seq_len].

    Always "inputs" and "targets"; with document packing also "segment_ids" and "positions"; from
    a mixture of more than one source also "source_tokens" (int64 [number of sources], in
    `config.source_names` order: the target tokens of this batch that came from each source).
    """
    manifests = open_sources(config.sources, verify=config.verify)
    chunks = _chunk_stream(config, manifests)
    rows = host_batch_size(config)
    source_count = len(manifests)
    if config.packing == "concat":
        return ConcatPackIterDataset(chunks, rows=rows, seq_len=config.seq_len, source_count=source_count)
    return DocumentPackIterDataset(
        chunks, rows=rows, seq_len=config.seq_len, eot_id=manifests[0].tokenizer.eot_id, source_count=source_count
    )


def make_iterator(config: LoaderConfig) -> grain.DatasetIterator:
    """A checkpointable iterator over `make_dataset(config)`; call `close()` when done with it."""
    return iter(make_dataset(config))
