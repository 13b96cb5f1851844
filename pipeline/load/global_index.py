"""The global index: which record pieces form each row of the global batch, step after step.

Every process walks the same plan, computed from document lengths alone (`lengths`), and reads
only the records its rows need; so the global batch at step `s` depends on the data, the seed,
`seq_len`, the global batch size, the packing, the mixture weights and `s`, never on the mesh, the
number of processes or the prefetch workers.

What a batch holds is a draw over the whole epoch, not a stretch of it:

- `concat` packing: each row is a window of `seq_len + 1` tokens of the epoch's token stream, the
  windows drawn in a keyed order over the epoch (`concat_windows`);
- `document` packing: each epoch draws its units in a keyed order over the epoch, a unit being a
  record's documents that fit a row or one `seq_len`-token piece of a longer document
  (`document_units`); pieces are placed first fit into the rows of the batch, and the next batch
  starts with the first piece that fits no row;
- each source draws its own units epoch after epoch, so every epoch of every source is read exactly
  once, across all hosts, before it repeats (the one global batch that ends an epoch excepted);
- with several sources, each row (concat) or piece (document) comes from the source furthest below
  its weight in the current stage (`blending`), so realized token shares stay within a row of the
  weights at every step.

The plan is built lazily, one step at a time, from a `Position`: the step, and for each source its
count of units drawn whole, its tokens in the current stage and the pieces placed of its unit in
progress. That position is also the loader's checkpoint: a few integers that mean the same on any
topology. A unit's order is computed, never drawn or stored (`record_order`), so nothing at start-up
or resume depends on how far the run has gone. See docs/global-index.md for figures.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from pipeline.load.blending import next_source
from pipeline.load.concat_windows import ConcatWindows
from pipeline.load.document_units import DocumentUnits
from pipeline.load.lengths import SplitLengths
from pipeline.load.record_order import EndOfData

__all__ = ["PACKINGS", "EndOfData", "FirstFitRows", "Planner", "Position", "Stage", "StepPlan"]

PACKINGS = ("concat", "document")


@dataclasses.dataclass(frozen=True)
class Stage:
    """From step `start` on, sources supply tokens in the shares `weights` (mixture order)."""

    start: int
    weights: tuple[float, ...]


@dataclasses.dataclass(frozen=True)
class Position:
    """Where the plan stands before step `step`.

    For each source `k`: `finished[k]`, its units drawn whole since the run began (windows for
    concat packing; its epoch is that count over its units per epoch); `stage_tokens[k]`, the tokens
    taken from it since the current stage began; `placed[k]`, the pieces placed of its unit in
    progress (document packing; always 0 for concat).
    """

    step: int
    finished: tuple[int, ...]
    stage_tokens: tuple[int, ...]
    placed: tuple[int, ...]

    @classmethod
    def start(cls, sources: int) -> Position:
        return cls(0, (0,) * sources, (0,) * sources, (0,) * sources)

    def to_list(self) -> list[int]:
        return [self.step, *self.finished, *self.stage_tokens, *self.placed]

    @classmethod
    def from_list(cls, values: Sequence[int]) -> Position:
        values = [int(v) for v in values]
        n = (len(values) - 1) // 3
        if len(values) != 1 + 3 * n or n < 1:
            raise ValueError(f"a position is a step and three integers per source (got {values})")
        return cls(values[0], tuple(values[1 : 1 + n]), tuple(values[1 + n : 1 + 2 * n]), tuple(values[1 + 2 * n :]))


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

    def fit(self, n: int) -> tuple[int, int] | None:
        """Takes `n` tokens of the first row with room for them: (their flat offset in the batch,
        their segment id in the row), or None if no row has room."""
        tree, leaves = self._tree, self._leaves
        if tree[1] < n:
            return None
        k = 1
        while k < leaves:
            k *= 2
            if tree[k] < n:
                k += 1
        room = tree[k]
        tree[k] = room - n
        row = k - leaves
        self._pieces[row] += 1
        spot = (row + 1) * self._width - room, self._pieces[row]
        k //= 2
        while k:
            left, right = tree[2 * k], tree[2 * k + 1]
            top = left if left > right else right
            if tree[k] == top:
                break
            tree[k] = top
            k //= 2
        return spot

    def place(self, source: int, record: int, starts: list[int], lengths: list[int], first: int,
              out: list[int] | None) -> int:
        """Places pieces `first`, `first + 1`, ... of a record, each in the first row with room for
        it, up to the first that fits no row; returns that one's index (`len(lengths)` if all fit).
        Appends each placed piece to `out` in StepPlan's order, unless None."""
        fit = self.fit
        for j in range(first, len(lengths)):
            spot = fit(lengths[j])
            if spot is None:
                return j
            if out is not None:
                out += (source, record, starts[j], lengths[j], *spot)
        return len(lengths)


class Planner:
    """Walks the plan: `plan(position)` is the global batch at `position.step` and the position after.

    `num_epochs` (None: forever) ends the plan at the first batch that needs a unit of a later epoch
    of any source (`plan` and `advance` raise EndOfData).
    """

    def __init__(
        self, lengths: Sequence[SplitLengths], *, stages: Sequence[Stage], seed: int, seq_len: int, rows: int,
        packing: str, num_epochs: int | None = None,
    ):
        draws = ConcatWindows if packing == "concat" else DocumentUnits
        self._lengths = list(lengths)
        self._draws = [draws(split, seq_len=seq_len, seed=seed, source=k, num_epochs=num_epochs)
                       for k, split in enumerate(self._lengths)]
        self._units: dict[int, tuple[int, tuple[int, list[int], list[int], bool]]] = {}  # source -> (drawn, unit)
        self._stages = sorted(stages, key=lambda s: s.start)
        self._rows = rows
        self._packing = packing
        self.width = seq_len + 1 if packing == "concat" else seq_len

    def _weights(self, step: int) -> tuple[float, ...]:
        return [s for s in self._stages if s.start <= step][-1].weights

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
        tokens = list(position.stage_tokens)
        if step and any(s.start == step for s in self._stages):
            tokens = [0] * len(tokens)
        weights = self._weights(step)
        finished, placed = list(position.finished), list(position.placed)
        if self._packing == "concat":
            self._concat(weights, finished, tokens, out)
        else:
            self._document(weights, finished, tokens, placed, out)
        return Position(step + 1, tuple(finished), tuple(tokens), tuple(placed))

    def _concat(self, weights: Sequence[float], finished: list[int], tokens: list[int], out: list | None) -> None:
        """Each row: the next window of the source `next_source` names."""
        width, mixed = self.width, len(weights) > 1
        for row in range(self._rows):
            k = next_source(weights, tokens, width) if mixed else 0
            windows = self._draws[k]
            if out is None:
                windows.check(finished[k])
            else:
                dest = row * width
                for record, start, length in windows.pieces(finished[k]):
                    out += (k, record, start, length, dest, 0)
                    dest += length
            finished[k] += 1
            tokens[k] += width

    def _unit(self, source: int, drawn: int) -> tuple[int, list[int], list[int], bool]:
        """The unit in progress of a source, kept: a unit's pieces are placed over several calls."""
        kept = self._units.get(source)
        if kept is None or kept[0] != drawn:
            kept = drawn, self._draws[source].unit(drawn)
            self._units[source] = kept
        return kept[1]

    def _record_parts(self, pieces: list[int]) -> list[int]:
        """Pieces (six ints each, StepPlan's order) with those that run past their record's end cut
        into each record's part, one after another in the row, under the same segment id."""
        out: list[int] = []
        for at in range(0, len(pieces), 6):
            source, record, start, length, dest, segment = pieces[at : at + 6]
            for part, begin, n in self._lengths[source].parts(record, start, length):
                out += (source, part, begin, n, dest, segment)
                dest += n
        return out

    def _document(self, weights: Sequence[float], finished: list[int], tokens: list[int], placed: list[int],
                  out: list | None) -> None:
        """Pieces first fit into the rows until one fits none: a unit's pieces at a time for one
        source, one piece at a time from the source `next_source` names for a mixture."""
        rows = FirstFitRows(self._rows, self.width)
        mixed = len(weights) > 1
        while True:
            k = next_source(weights, tokens, self.width) if mixed else 0
            record, starts, lengths, spills = self._unit(k, finished[k])
            first, mark = placed[k], len(out) if out is not None else 0
            if mixed:
                spot = rows.fit(lengths[first])
                if spot is not None and out is not None:
                    out += (k, record, starts[first], lengths[first], *spot)
                end = first if spot is None else first + 1
            else:
                end = rows.place(k, record, starts, lengths, first, out)
            if spills and out is not None:
                out[mark:] = self._record_parts(out[mark:])
            tokens[k] += sum(lengths[first:end])
            placed[k] = end
            if end == len(lengths):
                finished[k] += 1
                placed[k] = 0
            elif end == first or not mixed:
                return
