"""The global index: which record pieces form each row of the global batch, step after step.

Every process walks the same plan, computed from document lengths alone (`lengths`), and reads
only the records its rows need; so the global batch at step `s` depends on the data, the seed,
`seq_len`, the global batch size, the packing, the mixture weights and `s`, never on the mesh, the
number of processes or the prefetch workers.

The plan is one stream of records for the whole run:

- each source's records are read in a fresh keyed order per epoch (`record_order`: a bijection
  computed position by position, never drawn or stored), one epoch after another: a source's
  epoch reads each of its records exactly once before any repeats;
- with several sources, the next record comes from the source furthest below its token share in
  the current stage (the fewest tokens per unit of weight since the stage began, the first on a
  tie), so realized shares follow each stage's weights within a record;
- `concat` packing cuts the stream into `[batch, seq_len + 1]` windows; `document` packing places
  each record's documents (those over `seq_len` cut into pieces) first fit into the rows of the
  batch, and starts the next batch with the first piece that fits no row.

Nothing is dropped or skipped, so every epoch of every source is read once, across all hosts, before
it repeats, except for the one global batch that straddles the epoch's end. The plan is built
lazily, one step at a time, from a `Position`: the step, each source's count of finished records
and its tokens in the current stage, and how much of the record in progress is placed. That
position is also the loader's checkpoint: a few integers that mean the same on any topology.

Costs: a step's plan touches only the records it places, so building it is microseconds of Python
per document; memory is the lengths' memory maps (4 bytes per document, 8 per record, paged in as
touched), whatever the number of records. See docs/global-index.md for figures.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from itertools import accumulate

import numpy as np

from pipeline.load.lengths import SplitLengths
from pipeline.load.record_order import EpochOrder

PACKINGS = ("concat", "document")


@dataclasses.dataclass(frozen=True)
class Stage:
    """From step `start` on, sources supply tokens in the shares `weights` (mixture order)."""

    start: int
    weights: tuple[float, ...]


@dataclasses.dataclass(frozen=True)
class Position:
    """Where the plan stands before step `step`.

    `finished[k]`: records of source `k` fully placed since the run began (its epoch is
    `finished[k] // records`). `stage_tokens[k]`: tokens taken from source `k` since the current
    stage began. `source`: the source of the record in progress (its next record), -1 if none;
    `placed`: how much of it is placed, in tokens (concat) or pieces (document).
    """

    step: int
    finished: tuple[int, ...]
    stage_tokens: tuple[int, ...]
    source: int = -1
    placed: int = 0

    @classmethod
    def start(cls, sources: int) -> Position:
        return cls(0, (0,) * sources, (0,) * sources)

    def to_list(self) -> list[int]:
        return [self.step, self.source, self.placed, *self.finished, *self.stage_tokens]

    @classmethod
    def from_list(cls, values: Sequence[int]) -> Position:
        values = [int(v) for v in values]
        n = (len(values) - 3) // 2
        return cls(values[0], tuple(values[3 : 3 + n]), tuple(values[3 + n :]), values[1], values[2])


@dataclasses.dataclass(frozen=True)
class StepPlan:
    """The pieces of one global batch, as parallel arrays: `length` tokens of record `record` of
    source `source` from token `start`, placed at flat offset `dest` of the [rows, width] batch
    (width: seq_len + 1 for concat, seq_len for document), with `segment` its segment id within
    its row (document packing; 0 for concat)."""

    source: np.ndarray
    record: np.ndarray
    start: np.ndarray
    length: np.ndarray
    dest: np.ndarray
    segment: np.ndarray

    def rows(self, first: int, end: int, width: int) -> StepPlan:
        """The pieces of rows [first, end), clipped to them, with `dest` counted from row `first`."""
        lo, hi = first * width, end * width
        keep = (self.dest < hi) & (self.dest + self.length > lo)
        dest, length, start = self.dest[keep], self.length[keep], self.start[keep]
        cut = np.maximum(lo - dest, 0)
        length = np.minimum(dest + length, hi) - dest - cut
        return StepPlan(self.source[keep], self.record[keep], start + cut, length, dest + cut - lo, self.segment[keep])


class FirstFitRows:
    """The rows of a document batch as they fill, for first fit: the free room of each row in a max
    tree, so the first row with room for a piece is found in O(log rows) (a global batch holds
    hundreds of rows, and a step thousands of documents)."""

    def __init__(self, rows: int, width: int):
        self._leaves = leaves = 1 << (rows - 1).bit_length()
        self._tree = tree = [0] * leaves + [width] * rows + [-1] * (leaves - rows)
        for k in range(leaves - 1, 0, -1):
            tree[k] = max(tree[2 * k], tree[2 * k + 1])
        self._width = width
        self._pieces = [0] * rows

    def place(self, source: int, record: int, starts: list[int], lengths: list[int], first: int,
              out: list[int] | None) -> int:
        """Places pieces `first`, `first + 1`, ... of a record, each in the first row with room for
        it, up to the first that fits no row; returns that one's index (`len(lengths)` if all fit).
        Appends each placed piece to `out` in StepPlan's order, unless None."""
        tree, leaves, width, pieces = self._tree, self._leaves, self._width, self._pieces
        for j in range(first, len(lengths)):
            n = lengths[j]
            if tree[1] < n:
                return j
            k = 1
            while k < leaves:
                k *= 2
                if tree[k] < n:
                    k += 1
            room = tree[k]
            tree[k] = room - n
            row = k - leaves
            pieces[row] += 1
            if out is not None:
                out += (source, record, starts[j], n, (row + 1) * width - room, pieces[row])
            k //= 2
            while k:
                left, right = tree[2 * k], tree[2 * k + 1]
                top = left if left > right else right
                if tree[k] == top:
                    break
                tree[k] = top
                k //= 2
        return len(lengths)


class EndOfData(Exception):
    """The plan needs a record past the last epoch asked for."""


class Planner:
    """Walks the plan: `plan(position)` is the global batch at `position.step` and the position after.

    `num_epochs` (None: forever) ends the plan at the first batch that needs a record of a later
    epoch of any source.
    """

    def __init__(
        self, lengths: Sequence[SplitLengths], *, stages: Sequence[Stage], seed: int, seq_len: int, rows: int,
        packing: str, num_epochs: int | None = None,
    ):
        self._lengths = list(lengths)
        self._orders = [EpochOrder(split.records, seed=seed, source=k) for k, split in enumerate(self._lengths)]
        self._last_pieces: dict[int, tuple[int, tuple[list[int], list[int]]]] = {}  # source -> (record, pieces)
        self._stages = sorted(stages, key=lambda s: s.start)
        self._seq_len = seq_len
        self._rows = rows
        self._packing = packing
        self._num_epochs = num_epochs
        self.width = seq_len + 1 if packing == "concat" else seq_len

    def _weights(self, step: int) -> tuple[float, ...]:
        return [s for s in self._stages if s.start <= step][-1].weights

    def record_of(self, source: int, finished: int) -> int:
        """The split index of source `source`'s record after `finished` others."""
        records = self._lengths[source].records
        epoch, index = divmod(finished, records)
        if self._num_epochs is not None and epoch >= self._num_epochs:
            raise EndOfData
        return self._orders[source].record(epoch, index)

    def _pieces(self, source: int, record: int) -> tuple[list[int], list[int]]:
        """Starts and lengths of a record's pieces: for concat the whole record, for document
        packing its documents, cut into at most seq_len tokens. The last record's are kept per
        source: a record in progress is taken up again by the next step."""
        cached = self._last_pieces.get(source)
        if cached is not None and cached[0] == record:
            return cached[1]
        lengths = self._lengths[source].documents(record).tolist()
        size = self._seq_len
        if self._packing == "concat":
            pieces = [0], [sum(lengths)]
        elif max(lengths, default=0) <= size:  # the common case: no document to cut
            pieces = list(accumulate(lengths[:-1], initial=0)), lengths
        else:
            starts, cut, at = [], [], 0
            for n in lengths:
                for offset in range(0, n, size):
                    starts.append(at + offset)
                    cut.append(min(size, n - offset))
                at += n
            pieces = starts, cut
        self._last_pieces[source] = record, pieces
        return pieces

    def plan(self, position: Position) -> tuple[StepPlan, Position]:
        """Raises EndOfData when the batch cannot be completed within `num_epochs`."""
        out: list[int] = []  # six ints per piece, in StepPlan's order
        after = self._walk(position, out)
        return StepPlan(*np.array(out, np.int64).reshape(-1, 6).T), after

    def advance(self, position: Position) -> Position:
        """The position after the batch at `position`, without building its plan: what a reader
        that skips the batch needs."""
        return self._walk(position, None)

    def _walk(self, position: Position, out: list | None) -> Position:
        """Places the pieces of the batch at `position`, appending them to `out` unless None."""
        step = position.step
        finished, tokens = list(position.finished), list(position.stage_tokens)
        if step and any(s.start == step for s in self._stages):
            tokens = [0] * len(tokens)
        weights = self._weights(step)
        source, placed = position.source, position.placed
        rows = FirstFitRows(self._rows, self.width) if self._packing == "document" else None
        need, have = self._rows * self.width, 0
        while True:
            if source < 0:
                source = 0 if len(weights) == 1 else min(range(len(weights)), key=lambda k: tokens[k] / weights[k])
                record = self.record_of(source, finished[source])
                starts, lengths = self._pieces(source, record)
                tokens[source] += sum(lengths)
                placed = 0
            else:
                record = self.record_of(source, finished[source])
                starts, lengths = self._pieces(source, record)
            if self._packing == "concat":
                take = min(need - have, lengths[0] - placed)
                if out is not None:
                    out += (source, record, placed, take, have, 0)
                placed += take
                have += take
                full = have == need
                done = placed == lengths[0]
            else:
                placed = rows.place(source, record, starts, lengths, placed, out)
                full = placed < len(lengths)
                done = placed == len(lengths)
            if done:
                finished[source] += 1
                source, placed = -1, 0
            if full:
                break
        return Position(step + 1, tuple(finished), tuple(tokens), source, placed)
