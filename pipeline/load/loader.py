"""Deterministic per-host training batches from prepared directories, as a Grain pipeline.

    lengths of every record's documents (lengths: scanned once, cached by shard hash)
    -> the global plan of each step's batch                  (global_index: from lengths alone)
    -> this host's rows of it, read from ArrayRecord shards  (rows; in the prefetch workers)

A batch's rows are drawn from the whole epoch (windows of the token stream for concat packing,
records' short documents and long documents' pieces for document packing; see global_index).

The global batch at step `s` depends on the data, the seed, `seq_len`, the global batch size, the
packing, the mixture's weights and `s`; a process holds rows `[i * b, (i + 1) * b)` of it, where
`b = global_batch_size / shard_count` and `i` is its `shard_index`. The iterator's state is the
plan's position (a few integers, JSON, the same on every process), with the version of the plan
that gave it: a state of another version is refused, not read as a position in other batches. It
fits `grain.checkpoint.CheckpointSave` in an Orbax CheckpointManager, and restores into an iterator
with any `shard_count` that divides the global batch and any `worker_count`: the restored
iterator yields exactly the rows of the global batches the uninterrupted run would have seen.
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Any

import grain
import numpy as np
from etils import epath

from pipeline.dataset.integrity import shard_problems
from pipeline.load.data_spec import DataSource, check_names
from pipeline.load.errors import LoaderError, LoaderSettingError
from pipeline.load.global_index import PACKINGS, EndOfData, Planner, Position, Stage
from pipeline.load.lengths import SplitLengths
from pipeline.load.mixture import check_compatible
from pipeline.load.record_reads import SplitRecords
from pipeline.load.rows import (
    FIELDS,
    batch_of,
    concat_rows,
    document_rows,
    new_window,
    transport_dtype,
)
from schemas import formats
from schemas.manifest import Manifest, ManifestError
from schemas.records import numpy_dtype

# Token ids leave the loader as int32 (what embedding lookups take).
MAX_VOCAB = 2**31
# Batches read ahead in each prefetch worker, or in the main process without workers.
_READ_OPTIONS = grain.ReadOptions(num_threads=1, prefetch_buffer_size=4)
_WORKER_BUFFER = 4
_POSITION = "_position"  # the position after each batch of a window, from the worker that made it
# Smaller arrays (a window's source token counts) travel pickled: a shared-memory segment costs more.
_MIN_SHARED_BYTES = 2**16
_FOREVER = 2**62  # steps of a plan without num_epochs
# A prefetch worker hands over a window of consecutive batches at once, about this many tokens:
# each hand-off costs shared-memory blocks and a queue round trip, and each window's plan some
# hundred numpy calls, which one batch of a small model would not amortize (32 steps of 16 x 1,024
# measured 4 to 10% fewer CPU seconds per token than 16). Batches do not depend on it.
_WINDOW_TOKENS = 2**19
_MAX_WINDOW = 64
_RECORD_BITS = 40  # a record's index in its split, below its source's, in one int64 key
_RECORD_MASK = (1 << _RECORD_BITS) - 1


@dataclasses.dataclass(frozen=True)
class LoaderConfig:
    """What decides a host's batches, and how they are fetched.

    `data`: one prepared directory, or the sources of a mixture (`parse_data_spec`); a mixture of
    more than one source adds "source_tokens" to every batch. `packing`: "concat" (windows of the
    token stream) or "document" (whole documents per row, with segment ids and positions).
    `num_epochs`: None repeats forever; otherwise the batches end before the first that needs a
    record of a later epoch of any source. `worker_count`: prefetch processes.
    `shard_index`/`shard_count`: which of `shard_count` equal row ranges of the global batch this
    process feeds; processes that feed the same rows pass the same index, and get identical
    batches. None takes them from JAX's process index and count. `verify`: re-hash every shard against its manifest when opening (reads all
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
            raise LoaderSettingError("split", self.split, f"must be one of {formats.SPLITS}")
        if self.seq_len < 1:
            raise LoaderSettingError("seq_len", self.seq_len, "must be at least 1")
        if self.global_batch_size < 1:
            raise LoaderSettingError("global_batch_size", self.global_batch_size, "must be at least 1")
        if self.seed < 0:
            raise LoaderSettingError("seed", self.seed, "must be at least 0")
        if self.packing not in PACKINGS:
            raise LoaderSettingError("packing", self.packing, f"must be one of {PACKINGS}")
        if self.num_epochs is not None and self.num_epochs < 1:
            raise LoaderSettingError("num_epochs", self.num_epochs, "must be at least 1, or None to repeat")
        if self.worker_count < 0:
            raise LoaderSettingError("worker_count", self.worker_count, "must be at least 0")
        if self.shard_count is not None and self.shard_count < 1:
            raise LoaderSettingError("shard_count", self.shard_count, "must be at least 1")
        if self.shard_index is not None and self.shard_index < 0:
            raise LoaderSettingError("shard_index", self.shard_index, "must be at least 0")

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



def resolve_shard(shard_index: int | None, shard_count: int | None) -> tuple[int, int]:
    """Fills what is not given from JAX's process index and count, where the program uses JAX.

    A program of several processes has imported JAX before it makes its loader (to call
    `jax.distributed.initialize`); one that has not is a single process, index 0 of 1. So the
    loader never imports JAX itself, and the `load` extra alone runs it.
    """
    if shard_index is None or shard_count is None:
        jax = sys.modules.get("jax")
        shard_index = (jax.process_index() if jax else 0) if shard_index is None else shard_index
        shard_count = (jax.process_count() if jax else 1) if shard_count is None else shard_count
    if not 0 <= shard_index < shard_count:
        raise LoaderError(f"shard_index must be in [0, shard_count) (got {shard_index=}, {shard_count=})")
    return shard_index, shard_count


def host_batch_size(config: LoaderConfig) -> int:
    """Rows of each batch this process gets: global_batch_size / shard_count."""
    _, count = resolve_shard(config.shard_index, config.shard_count)
    if config.global_batch_size % count:
        raise LoaderError(
            f"global_batch_size {config.global_batch_size} is not divisible by the "
            f"{count} parts of the global batch (shard_count); use a multiple of {count}"
        )
    return config.global_batch_size // count


def mixture_stages(sources: tuple[DataSource, ...]) -> list[Stage]:
    """The weights of every stage of a mixture, in source order, each summing to 1."""
    starts = sorted({0, *(step for s in sources for step, _ in s.stages)})
    stages = []
    for start in starts:
        weights = [s.weight_at(start) for s in sources]
        stages.append(Stage(start, tuple(w / sum(weights) for w in weights)))
    return stages


class _HostRows:
    """Plans the global batches and reads this host's rows of them; opens its files in the process
    that uses it (a prefetch worker gets a pickled copy without them)."""

    def __init__(self, config: LoaderConfig, manifests: tuple[Manifest, ...]):
        self._config = config
        self._manifests = manifests
        index, count = resolve_shard(config.shard_index, config.shard_count)
        self.rows = host_batch_size(config)
        self._first_row = index * self.rows
        self._planner: Planner | None = None
        self._lengths: list[SplitLengths] = []
        self._sources: list[SplitRecords] = []
        self._walked: tuple[Position, Position] | None = None  # (a start, the position reached from it)
        self._dtype = numpy_dtype(manifests[0].dtype)
        self._window_dtype = transport_dtype(manifests[0].tokenizer.n_vocab, config.seq_len)
        self._eot = manifests[0].tokenizer.eot_id

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_planner": None, "_lengths": [], "_sources": [], "_walked": None}

    @property
    def planner(self) -> Planner:
        if self._planner is None:
            config = self._config
            self._lengths = [SplitLengths.of(s.path, m, config.split) for s, m in zip(config.sources, self._manifests)]
            self._planner = Planner(
                self._lengths,
                stages=mixture_stages(config.sources),
                seed=config.seed,
                seq_len=config.seq_len,
                rows=config.global_batch_size,
                packing=config.packing,
                num_epochs=config.num_epochs,
            )
            self._sources = [
                SplitRecords([str(epath.Path(s.path) / shard.path) for shard in m.shards_of(config.split)], lengths)
                for s, m, lengths in zip(config.sources, self._manifests, self._lengths)
            ]
        return self._planner

    def position_before(self, start: Position, step: int) -> Position:
        """The plan's position at `step`, moved from `start` (or from where the last walk stopped)."""
        position = start
        if self._walked is not None and self._walked[0] == start and self._walked[1].step <= step:
            position = self._walked[1]
        if position.step < step:
            position = self.planner.advance(position, step - position.step)
        self._walked = (start, position)
        return position

    def steps(self, start: Position) -> int:
        """How many complete batches the plan holds from `start` (walks it when `num_epochs` is set)."""
        if self._config.num_epochs is None:
            return _FOREVER
        return self.planner.steps(start)

    def window(self, steps: int) -> dict[str, np.ndarray]:
        """Zeroed arrays for this host's rows of `steps` batches, which `fill` lays out in place."""
        config = self._config
        return new_window(steps, rows=self.rows, seq_len=config.seq_len, packing=config.packing,
                          source_count=len(self._manifests), dtype=self._window_dtype)

    def fill(self, position: Position, window: dict[str, np.ndarray]) -> list[Position]:
        """Lays out this host's rows of the batches from `position` in `window` (one batch per step of
        a `window`); returns the position after each."""
        planner = self.planner
        plan, positions = planner.plan_steps(position, len(window[FIELDS][0]))
        self._walked = (self._walked[0], positions[-1]) if self._walked else None
        mine = plan.rows(self._first_row, self._first_row + self.rows, rows=self._config.global_batch_size,
                         width=planner.width)
        # Records are read whole (ArrayRecord's unit), once per window, and held as the bytes read;
        # only the parts are copied.
        keys, which = np.unique(mine.source << _RECORD_BITS | mine.record, return_inverse=True)
        records = []
        for source, split in enumerate(self._sources):
            mask = keys >> _RECORD_BITS == source
            records += map(self._tokens, split.read(keys[mask] & _RECORD_MASK))
        if self._config.packing == "concat":
            concat_rows(mine, records, which, window, width=planner.width)
        else:
            before = np.full(len(mine.record), self._eot, np.int64)
            for source, lengths in enumerate(self._lengths):
                heads = np.flatnonzero((mine.start == 0) & (mine.source == source))
                token = lengths.tokens_before(mine.record[heads])
                before[heads] = np.where(token < 0, self._eot, token)
            document_rows(mine, records, which, window, before=before)
        return positions

    def _tokens(self, record: bytes) -> np.ndarray:
        """A record's tokens in the windows' dtype: the bytes read, seen as that dtype where it is as
        wide as the records' (token ids fit both), else converted (uint16 tokens, a `seq_len` over
        65,535)."""
        if self._dtype.itemsize == self._window_dtype.itemsize:
            return np.frombuffer(record, self._window_dtype)
        return np.frombuffer(record, self._dtype).astype(self._window_dtype)


class _Windows(grain.MapDataset):
    """Element `j`: this host's rows of the batches at steps `start.step + j * window` onwards
    (`window` of them, fewer at the end of `steps`), as a `new_window`, with the position after each
    under `_POSITION`. Read in order, each reader walks the plan once."""

    def __init__(self, host: _HostRows, start: Position, steps: int):
        super().__init__()
        self._host = host
        self._start = start
        self._steps = steps
        self._window = max(1, min(_MAX_WINDOW, _WINDOW_TOKENS // (host.rows * host.planner.width)))

    def __len__(self) -> int:
        return -(-self._steps // self._window)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return self.slice(index)
        first = index * self._window
        position = self._host.position_before(self._start, self._start.step + first)
        window = self._host.window(min(self._window, self._steps - first))
        window[_POSITION] = [p.to_list() for p in self._host.fill(position, window)]
        return window

    def __str__(self) -> str:
        return f"Windows(from step {self._start.step}, {self._window} steps each)"


class HostBatchIterDataset(grain.IterDataset):
    """This host's rows of the global batches, read ahead by `worker_count` processes (0: a thread)."""

    def __init__(self, host: _HostRows, *, worker_count: int, sources: int):
        super().__init__()
        self._host = host
        self._worker_count = worker_count
        self._source_count = sources

    def __iter__(self) -> grain.DatasetIterator:
        return _HostBatchIterator(self._host, worker_count=self._worker_count, start=Position.start(self._source_count))

    def __str__(self) -> str:
        return f"HostBatchIterDataset(worker_count={self._worker_count})"


class _HostBatchIterator(grain.DatasetIterator):
    """State: the plan's position before the next batch. Restoring it opens a fresh read-ahead
    pipeline there, so a state saved with any number of workers (or processes) restores into any
    other; the pipeline opens at the first `next`, so a restore right after creation starts no
    workers it would have to stop."""

    def __init__(self, host: _HostRows, *, worker_count: int, start: Position):
        super().__init__()
        self._host = host
        self._worker_count = worker_count
        self._position = start
        self._reader: grain.DatasetIterator | None = None
        self._window: dict[str, np.ndarray] = {}
        self._next_in_window = 0

    def _open(self) -> grain.DatasetIterator:
        windows = _Windows(self._host, self._position, self._host.steps(self._position))
        ds = windows.to_iter_dataset(_READ_OPTIONS)
        if self._worker_count:
            ds = grain.experimental.WithOptionsIterDataset(
                ds, grain.experimental.DatasetOptions(min_shm_size=_MIN_SHARED_BYTES)
            )
            _allow_unparsed_absl_flags()
            ds = ds.mp_prefetch(
                grain.MultiprocessingOptions(num_workers=self._worker_count, per_worker_buffer_size=_WORKER_BUFFER)
            )
        return iter(ds)

    def __next__(self) -> dict[str, np.ndarray]:
        if self._reader is None:
            self._reader = self._open()
        if self._next_in_window == len(self._window.get(_POSITION, ())):
            self._window, self._next_in_window = next(self._reader), 0
        k = self._next_in_window
        self._next_in_window += 1
        self._position = Position.from_list(self._window[_POSITION][k])
        return batch_of(self._window, k)

    def get_state(self) -> dict[str, Any]:
        return {"position": self._position.to_list(), "version": formats.LOADER_STATE_VERSION}

    def set_state(self, state: dict[str, Any]) -> None:
        version = state.get("version", 1)
        if version != formats.LOADER_STATE_VERSION:
            raise LoaderError(
                f"the loader state is a position in batches of loader version {version}; this loader is version "
                f"{formats.LOADER_STATE_VERSION} and draws other batches, so resuming would train on other data; "
                "resume with the release that saved it, or start a new run"
            )
        self._close_reader()
        self._position = Position.from_list(state["position"])

    def _close_reader(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None
        self._window, self._next_in_window = {}, 0

    def close(self) -> None:
        self._close_reader()
        super().close()

    def __str__(self) -> str:
        return f"HostBatchIterator(worker_count={self._worker_count})"


def _allow_unparsed_absl_flags() -> None:
    """Lets Grain's multiprocess prefetch run in programs that do not parse absl flags.

    Grain 0.2.18 reads an absl flag when it starts workers and fails if flags were never parsed,
    as in any script not started through `absl.app` (google/grain#1355, fixed upstream). Marking
    them parsed keeps every flag at its default; a program that parses its flags is left alone.
    """
    from absl import flags

    if not flags.FLAGS.is_parsed():
        flags.FLAGS.mark_as_parsed()


def make_dataset(config: LoaderConfig) -> grain.IterDataset:
    """This host's batches: dicts of int32 arrays [host_batch, seq_len].

    Always "inputs" and "targets"; with document packing also "segment_ids" and "positions"; from
    a mixture of more than one source also "source_tokens" (int64 [number of sources], in
    `config.source_names` order: the target tokens of these rows that came from each source).
    """
    manifests = open_sources(config.sources, verify=config.verify)
    for source, manifest in zip(config.sources, manifests):
        if not manifest.shards_of(config.split):
            present = sorted({s.split for s in manifest.shards})
            raise LoaderError(
                f"{source.path} has no {config.split!r} split (it has {present}); "
                "choose one of those or prepare with --validation-fraction"
            )
    host = _HostRows(config, manifests)
    if config.num_epochs is not None and host.steps(Position.start(len(manifests))) == 0:
        row_tokens = host.planner.width
        raise LoaderError(
            f"{config.num_epochs} epoch(s) of the {config.split!r} split hold fewer than one global batch "
            f"of {config.global_batch_size} x {row_tokens} tokens; lower seq_len or global_batch_size, or raise num_epochs"
        )
    return HostBatchIterDataset(host, worker_count=config.worker_count, sources=len(manifests))


def make_iterator(config: LoaderConfig) -> grain.DatasetIterator:
    """A checkpointable iterator over `make_dataset(config)`; call `close()` when done with it."""
    return iter(make_dataset(config))
