"""Deterministic per-host training batches from prepared directories, as a Grain pipeline.

    the prepared directories, opened and checked             (directories)
    -> the global plan of each step's batch, and this host's
       rows of it read from ArrayRecord shards               (host_rows; in the prefetch workers)
    -> windows of consecutive batches, read ahead            (here; prefetch)

A batch's rows are drawn from the whole epoch (windows of the token stream for concat packing,
records' short documents and long documents' pieces for document packing; see global_index).

The global batch at step `s` depends on the data, the seed, `seq_len`, the global batch size, the
packing, the mixture's weights and `s`; a process holds rows `[i * b, (i + 1) * b)` of it, where
`b = global_batch_size / shard_count` and `i` is its `shard_index`. The iterator's state is the
plan's position (a few integers, JSON, the same on every process), with the version of the plan
that gave it and the packing: a state of another version or packing is refused, not read as a
position in other batches. It fits `grain.checkpoint.CheckpointSave` in an Orbax
CheckpointManager, and restores into an iterator with any `shard_count` that divides the global
batch and any `worker_count`: the restored iterator yields exactly the rows of the global batches
the uninterrupted run would have seen.
"""

from __future__ import annotations

from typing import Any

import grain
import numpy as np

from pipeline.load import prefetch
from pipeline.load.config import LoaderConfig
from pipeline.load.directories import check_split, open_sources
from pipeline.load.errors import LoaderError
from pipeline.load.global_index import Position
from pipeline.load.host_rows import HostRows
from pipeline.load.rows import batch_of
from schemas import formats

# Batches read ahead in each prefetch worker, or in the main process without workers.
_READ_OPTIONS = grain.ReadOptions(num_threads=1, prefetch_buffer_size=4)
_POSITION = "_position"  # the position after each batch of a window, from the worker that made it
# A prefetch worker hands over a window of consecutive batches at once, about this many tokens:
# each hand-off costs shared-memory blocks and a queue round trip, and each window's plan some
# hundred numpy calls, which one batch of a small model would not amortize (32 steps of 16 x 1,024
# measured 4 to 10% fewer CPU seconds per token than 16). Batches do not depend on it.
_WINDOW_TOKENS = 2**19
_MAX_WINDOW = 64


class _Windows(grain.MapDataset):
    """Element `j`: this host's rows of the batches at steps `start.step + j * window` onwards
    (`window` of them, fewer at the end of `steps`), as a `new_window`, with the position after each
    under `_POSITION`. Read in order, each reader walks the plan once."""

    def __init__(self, host: HostRows, start: Position, steps: int):
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
    """This host's rows of the global batches, read ahead by `worker_count` processes (0: a
    thread)."""

    def __init__(self, host: HostRows, *, worker_count: int, sources: int):
        super().__init__()
        self._host = host
        self._worker_count = worker_count
        self._source_count = sources

    def __iter__(self) -> grain.DatasetIterator:
        return _HostBatchIterator(
            self._host, worker_count=self._worker_count, start=Position.start(self._source_count)
        )

    def __str__(self) -> str:
        return f"HostBatchIterDataset(worker_count={self._worker_count})"


class _HostBatchIterator(grain.DatasetIterator):
    """State: the plan's position before the next batch. Restoring it opens a fresh read-ahead
    pipeline there, so a state saved with any number of workers (or processes) restores into any
    other; the pipeline opens at the first `next`, so a restore right after creation starts no
    workers it would have to stop."""

    def __init__(self, host: HostRows, *, worker_count: int, start: Position):
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
            ds = prefetch.in_workers(ds, self._worker_count)
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
        return {
            "position": self._position.to_list(),
            "version": formats.LOADER_STATE_VERSION,
            "packing": self._host.packing,
        }

    def set_state(self, state: dict[str, Any]) -> None:
        version = state.get("version", 1)
        if version != formats.LOADER_STATE_VERSION:
            raise LoaderError(
                f"the loader state is a position in batches of loader version {version}; this "
                f"loader is version {formats.LOADER_STATE_VERSION} and draws other batches, so "
                "resuming would train on other data; resume with the release that saved it, or "
                "start a new run"
            )
        if state.get("packing") != self._host.packing:
            raise LoaderError(
                f"the loader state is a position in batches packed {state.get('packing')!r}; this "
                f"loader packs {self._host.packing!r}, whose batches differ, so resuming would "
                "train on other data; resume with the packing that saved it, or start a new run"
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


def make_dataset(config: LoaderConfig) -> grain.IterDataset:
    """This host's batches: dicts of int32 arrays [host_batch, seq_len].

    Always "inputs" and "targets"; with document packing also "segment_ids" and "positions"; from
    a mixture of more than one source also "source_tokens" (int64 [number of sources], in
    `config.source_names` order: the target tokens of these rows that came from each source).
    """
    manifests = open_sources(config.sources, verify=config.verify)
    check_split(config.sources, manifests, config.split)
    host = HostRows(config, manifests)
    # The lengths index, which checks every shard it reads: damaged data fails here.
    planner = host.planner
    if config.num_epochs is not None and host.steps(Position.start(len(manifests))) == 0:
        row_tokens = planner.width
        raise LoaderError(
            f"{config.num_epochs} epoch(s) of the {config.split!r} split hold fewer than one "
            f"global batch of {config.global_batch_size} x {row_tokens} tokens; lower seq_len or "
            "global_batch_size, or raise num_epochs"
        )
    return HostBatchIterDataset(host, worker_count=config.worker_count, sources=len(manifests))


def make_iterator(config: LoaderConfig) -> grain.DatasetIterator:
    """A checkpointable iterator over `make_dataset(config)`; call `close()` when done with it."""
    return iter(make_dataset(config))
