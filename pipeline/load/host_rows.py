"""A host's rows of the global batches: the plan of every step walked from its position, and this
host's rows of it read and laid out, in the process that asks (a prefetch worker, or the main one).

    lengths of every record's documents (lengths: scanned once, cached by shard hash)
    -> the global plan of each step's batch                  (global_index: from lengths alone)
    -> this host's rows of it, read from ArrayRecord shards  (rows)
"""

from __future__ import annotations

from typing import Any

import numpy as np
from etils import epath

from pipeline.load.config import LoaderConfig, host_batch_size, resolve_shard
from pipeline.load.data_spec import DataSource
from pipeline.load.global_index import Planner, Position, Stage
from pipeline.load.lengths import SplitLengths
from pipeline.load.record_reads import SplitRecords
from pipeline.load.rows import FIELDS, concat_rows, document_rows, new_window, transport_dtype
from schemas.manifest import Manifest
from schemas.records import numpy_dtype

_FOREVER = 2**62  # steps of a plan without num_epochs
_RECORD_BITS = 40  # a record's index in its split, below its source's, in one int64 key
_RECORD_MASK = (1 << _RECORD_BITS) - 1


def mixture_stages(sources: tuple[DataSource, ...]) -> list[Stage]:
    """The weights of every stage of a mixture, in source order, each summing to 1."""
    starts = sorted({0, *(step for s in sources for step, _ in s.stages)})
    stages = []
    for start in starts:
        weights = [s.weight_at(start) for s in sources]
        stages.append(Stage(start, tuple(w / sum(weights) for w in weights)))
    return stages


class HostRows:
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
        self._walked: tuple[Position, Position] | None = (
            None  # (a start, the position reached from it)
        )
        self._held: dict[int, np.ndarray] = {}  # the last window's records, by source and index
        self._dtype = numpy_dtype(manifests[0].dtype)
        self._window_dtype = transport_dtype(manifests[0].tokenizer.n_vocab, config.seq_len)
        self._eot = manifests[0].tokenizer.eot_id

    def __getstate__(self) -> dict[str, Any]:
        return {
            **self.__dict__,
            "_planner": None,
            "_lengths": [],
            "_sources": [],
            "_walked": None,
            "_held": {},
        }

    @property
    def packing(self) -> str:
        return self._config.packing

    @property
    def planner(self) -> Planner:
        if self._planner is None:
            config = self._config
            self._lengths = [
                SplitLengths.of(s.path, m, config.split)
                for s, m in zip(config.sources, self._manifests)
            ]
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
                SplitRecords(
                    [str(epath.Path(s.path) / shard.path) for shard in m.shards_of(config.split)],
                    lengths,
                )
                for s, m, lengths in zip(config.sources, self._manifests, self._lengths)
            ]
        return self._planner

    def position_before(self, start: Position, step: int) -> Position:
        """The plan's position at `step`, moved from `start` (or from where the last walk
        stopped)."""
        position = start
        if self._walked is not None and self._walked[0] == start and self._walked[1].step <= step:
            position = self._walked[1]
        if position.step < step:
            position = self.planner.advance(position, step - position.step)
        self._walked = (start, position)
        return position

    def steps(self, start: Position) -> int:
        """How many complete batches the plan holds from `start` (walks it when `num_epochs` is
        set)."""
        if self._config.num_epochs is None:
            return _FOREVER
        return self.planner.steps(start)

    def window(self, steps: int) -> dict[str, np.ndarray]:
        """Zeroed arrays for this host's rows of `steps` batches, which `fill` lays out in place."""
        config = self._config
        return new_window(
            steps,
            rows=self.rows,
            seq_len=config.seq_len,
            packing=config.packing,
            source_count=len(self._manifests),
            dtype=self._window_dtype,
        )

    def fill(self, position: Position, window: dict[str, np.ndarray]) -> list[Position]:
        """Lays out this host's rows of the batches from `position` in `window` (one batch per step
        of a `window`); returns the position after each."""
        planner = self.planner
        plan, positions = planner.plan_steps(position, len(window[FIELDS][0]))
        self._walked = (self._walked[0], positions[-1]) if self._walked else None
        mine = plan.rows(
            self._first_row,
            self._first_row + self.rows,
            rows=self._config.global_batch_size,
            width=planner.width,
        )
        # Records are read whole (ArrayRecord's unit), once per window, and held as the bytes read;
        # only the parts are copied. Those the window before held are not read again: where a
        # window begins, its first rows share records with the last rows of the one before.
        keys, which = np.unique(mine.source << _RECORD_BITS | mine.record, return_inverse=True)
        listed = keys.tolist()
        missing = np.array([k for k in listed if k not in self._held], np.int64)
        for source, split in enumerate(self._sources):
            ask = missing[missing >> _RECORD_BITS == source]
            self._held.update(zip(ask.tolist(), map(self._tokens, split.read(ask & _RECORD_MASK))))
        records = [self._held[k] for k in listed]
        self._held = dict(zip(listed, records))
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
        """A record's tokens in the windows' dtype: the bytes read, seen as that dtype where it is
        as wide as the records' (token ids fit both), else converted (uint16 tokens, a `seq_len`
        over 65,535)."""
        if self._dtype.itemsize == self._window_dtype.itemsize:
            return np.frombuffer(record, self._window_dtype)
        return np.frombuffer(record, self._dtype).astype(self._window_dtype)
