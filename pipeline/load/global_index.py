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
  (`document_units`); each block of draws is packed best fit decreasing into rows
  (`best_fit_rows`), and a batch takes the next rows;
- `document-first-fit` packing: the same units, placed first fit in draw order into the rows of
  the batch, and the next batch starts with the first piece that fits no row;
- each source draws its own units epoch after epoch, so every epoch of every source is read exactly
  once, across all hosts, before it repeats (the one global batch that ends an epoch excepted);
- with several sources, each row (concat, document) or piece (document-first-fit) comes from the
  source furthest below its weight in the current stage (`blending`), so realized token shares stay
  within a row of the weights at every step.

The plan is built lazily, one step at a time, from a `Position`: the step, and for each source its
count of units drawn whole, its tokens in the current stage and the rows taken of its block in
progress (best fit) or the pieces placed of its unit in progress (first fit). That position is also
the loader's checkpoint: a few integers that mean the same on any topology. A unit's order is
computed, never drawn or stored (`record_order`), so nothing at start-up or resume depends on how
far the run has gone. See docs/global-index.md for figures.
"""

from __future__ import annotations

import bisect
import dataclasses
from collections.abc import Sequence

import numpy as np

from pipeline.load.best_fit_rows import BestFitRows
from pipeline.load.blending import next_source
from pipeline.load.concat_windows import ConcatWindows
from pipeline.load.document_units import DocumentUnits, UnitBlock
from pipeline.load.lengths import SplitLengths
from pipeline.load.record_order import EndOfData

__all__ = ["PACKINGS", "EndOfData", "FirstFitRows", "Planner", "Position", "Stage", "StepPlan"]

PACKINGS = ("concat", "document", "document-first-fit")
_PACKED = 2  # blocks whose best-fit rows a source keeps: a walk goes forward


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
    progress (first fit), or the rows taken of its block in progress (best fit; `finished[k]` is
    then the block's first draw); always 0 for concat.
    """

    step: int
    finished: tuple[int, ...]
    stage_tokens: tuple[int, ...]
    placed: tuple[int, ...]

    @classmethod
    def start(cls, sources: int) -> Position:
        return cls(0, (0,) * sources, (0,) * sources, (0,) * sources)

    def counts(self) -> tuple[list[int], list[int], list[int]]:
        """`finished`, `stage_tokens` and `placed`, as lists for a walk to update."""
        return list(self.finished), list(self.stage_tokens), list(self.placed)

    def to_list(self) -> list[int]:
        return [self.step, *self.finished, *self.stage_tokens, *self.placed]

    @classmethod
    def from_list(cls, values: Sequence[int]) -> Position:
        values = [int(v) for v in values]
        n = (len(values) - 1) // 3
        if len(values) != 1 + 3 * n or n < 1:
            raise ValueError(f"a position is a step and three integers per source (got {values})")
        return cls(
            values[0],
            tuple(values[1 : 1 + n]),
            tuple(values[1 + n : 1 + 2 * n]),
            tuple(values[1 + 2 * n :]),
        )


@dataclasses.dataclass(frozen=True)
class StepPlan:
    """The pieces of consecutive global batches, as parallel arrays: `length` tokens of record
    `record` of source `source` from token `start`, placed at flat offset `dest` of the
    [steps, rows, width] batches (width: seq_len + 1 for concat, seq_len for document), with
    `segment` its segment id within its row (document packing; 0 for concat). A piece never runs
    over a row's end."""

    source: np.ndarray
    record: np.ndarray
    start: np.ndarray
    length: np.ndarray
    dest: np.ndarray
    segment: np.ndarray

    def rows(self, first: int, end: int, *, rows: int, width: int) -> StepPlan:
        """The pieces of rows [first, end) of each batch of `rows` rows, with `dest` counted in the
        [steps, end - first, width] batches of those rows."""
        row, column = np.divmod(self.dest, width)
        step, row = np.divmod(row, rows)
        keep = (row >= first) & (row < end)
        dest = ((step[keep] * (end - first) + row[keep] - first) * width) + column[keep]
        return StepPlan(
            self.source[keep],
            self.record[keep],
            self.start[keep],
            self.length[keep],
            dest,
            self.segment[keep],
        )


class FirstFitRows:
    """The rows of a document batch as they fill, for first fit. The first row with room for a piece
    is found by bisection in the running maximum of the rows' free room (nondecreasing), a C call
    whatever the number of rows (a global batch holds hundreds, and a step thousands of documents).
    Taking room from a row changes that maximum only up to the next row with as much room as it
    had, which while rows fill in order is the row after it. `base`: the batch's flat offset among
    the batches planned together."""

    def __init__(self, rows: int, width: int, base: int = 0):
        self._room = [width] * rows
        self._most = [width] * rows  # the most room in rows 0 to r
        self._ends = [base + (row + 1) * width for row in range(rows)]  # flat offset past each row
        self._pieces = [0] * rows

    def place(
        self,
        lengths: list[int],
        first: int,
        last: int,
        out: list[int] | None,
        source: int,
        block: int,
    ) -> int:
        """Places pieces `first` to `last - 1` (of `lengths`) each in the first row with room for
        it, up to the first that fits no row; returns that one's index (`last` if all fit). Appends
        (source, block, piece, its flat offset, its segment id in the row) for each placed piece to
        `out`, unless None. The walk's inner loop: the lists are read and written inline."""
        room, most, ends, pieces = self._room, self._most, self._ends, self._pieces
        rows = len(room)
        for j in range(first, last):
            n = lengths[j]
            if most[-1] < n:
                return j
            row = bisect.bisect_left(most, n)
            had = room[row]
            room[row] = had - n
            pieces[row] += 1
            if out is not None:
                out += (source, block, j, ends[row] - had, pieces[row])
            # Rows before `row` have less room than `n`: the maximum through `row` is theirs or its
            # own.
            top = most[row - 1] if row else 0
            r = row
            while r < rows and most[r] == had:
                if room[r] > top:
                    top = room[r]
                if top == had:
                    break
                most[r] = top
                r += 1
        return last


class Planner:
    """Walks the plan: `plan(position)` is the global batch at `position.step` and the position
    after.

    `num_epochs` (None: forever) ends the plan at the first batch that needs a unit of a later epoch
    of any source (`plan` and `advance` raise EndOfData).

    A concat row's window is a function of the source's draw count alone, so the batches of many
    steps are planned at once, with numpy; the counts at a step come from the blending rule, row by
    row (for one source: `rows` a step). Document packing is sequential: its walk reads the lengths
    of pieces found a block of draws at a time (`DocumentUnits`), best fit takes that block's packed
    rows (`BestFitRows`) and first fit places its pieces, and the pieces placed become the plan's
    arrays at once, after the walk.
    """

    def __init__(
        self,
        lengths: Sequence[SplitLengths],
        *,
        stages: Sequence[Stage],
        seed: int,
        seq_len: int,
        rows: int,
        packing: str,
        num_epochs: int | None = None,
    ):
        draws = ConcatWindows if packing == "concat" else DocumentUnits
        self._draws = [
            draws(split, seq_len=seq_len, seed=seed, source=k, num_epochs=num_epochs)
            for k, split in enumerate(lengths)
        ]
        self._stages = sorted(stages, key=lambda s: s.start)
        self._new_stage = {
            s.start for s in self._stages if s.start
        }  # steps whose stage counts anew
        self._rows = rows
        self._packing = packing
        self.width = seq_len + 1 if packing == "concat" else seq_len
        self._packed: list[dict[int, BestFitRows]] = [{} for _ in lengths]  # by block's first draw

    def _weights(self, step: int) -> tuple[float, ...]:
        return [s for s in self._stages if s.start <= step][-1].weights

    def plan(self, position: Position) -> tuple[StepPlan, Position]:
        """The batch at `position` and the position after it; raises EndOfData when the batch cannot
        be completed within `num_epochs`."""
        plan, positions = self.plan_steps(position, 1)
        return plan, positions[0]

    def plan_steps(self, position: Position, steps: int) -> tuple[StepPlan, list[Position]]:
        """The batches of `steps` steps from `position`, in one plan, and the position after
        each."""
        if self._packing == "concat":
            sources: list[int] = []
            positions = self._concat(position, steps, sources)
            return self._concat_plan(position, steps, sources), positions
        # Best fit: four ints per row (source, block, its row in the block, dest); first fit: five
        # per piece (source, block, piece, dest, segment).
        out: list[int] = []
        blocks: dict[tuple[int, int], UnitBlock] = {}
        if self._packing == "document":
            packed: dict[tuple[int, int], BestFitRows] = {}
            positions = self._best_fit(position, steps, out, blocks, packed)
            return self._document_plan(self._pieces_of_rows(out, packed), blocks), positions
        positions = self._first_fit(position, steps, out, blocks)
        return self._document_plan(np.array(out, np.int64).reshape(-1, 5), blocks), positions

    def advance(self, position: Position, steps: int = 1) -> Position:
        """The position `steps` batches after `position`, without building their plan: what a
        reader that skips them needs."""
        if self._packing == "concat":
            return self._concat(position, steps, None)[-1]
        walk = self._best_fit if self._packing == "document" else self._first_fit
        return walk(position, steps, None, None)[-1]

    def steps(self, position: Position) -> int:
        """How many complete batches the plan holds from `position` (`num_epochs` set)."""
        if self._packing == "concat" and len(self._draws) == 1:
            return max(0, (self._draws[0].limit - position.finished[0]) // self._rows)
        count = 0
        try:
            while True:
                position = self.advance(position)
                count += 1
        except EndOfData:
            return count

    def _concat(self, position: Position, steps: int, sources: list[int] | None) -> list[Position]:
        """The positions after each of `steps` batches: each row takes the next window of the source
        `next_source` names; appends each row's source to `sources` unless None (or one source)."""
        finished, tokens = list(position.finished), list(position.stage_tokens)
        width, rows = self.width, self._rows
        limits = [windows.limit for windows in self._draws]
        positions = []
        for step in range(position.step, position.step + steps):
            if step in self._new_stage:
                tokens = [0] * len(tokens)
            weights = self._weights(step)
            if len(weights) == 1:
                finished[0] += rows
                tokens[0] += rows * width
            else:
                for _ in range(rows):
                    k = next_source(weights, tokens, width)
                    finished[k] += 1
                    tokens[k] += width
                    if sources is not None:
                        sources.append(k)
            if any(limit is not None and done > limit for limit, done in zip(limits, finished)):
                raise EndOfData
            positions.append(Position(step + 1, tuple(finished), tuple(tokens), position.placed))
        return positions

    def _concat_plan(self, position: Position, steps: int, sources: list[int]) -> StepPlan:
        """The windows of `steps` batches from `position`; `sources`: each row's source (empty for
        one)."""
        width, total = self.width, steps * self._rows
        row_source = np.array(sources, np.int64) if sources else np.zeros(total, np.int64)
        parts = []
        for k, windows in enumerate(self._draws):
            rows = np.flatnonzero(row_source == k)
            if not len(rows):
                continue
            which, record, start, length = windows.pieces(position.finished[k], len(rows))
            offset = np.cumsum(length) - length
            offset -= offset[np.searchsorted(which, which)]  # from the window's first run
            parts.append(
                (
                    np.full(len(which), k),
                    record,
                    start,
                    length,
                    rows[which] * width + offset,
                    np.zeros(len(which), np.int64),
                )
            )
        return StepPlan(*(np.concatenate(c) for c in zip(*parts)))

    def _best_fit(
        self,
        position: Position,
        steps: int,
        out: list[int] | None,
        blocks: dict[tuple[int, int], UnitBlock] | None,
        packed: dict[tuple[int, int], BestFitRows] | None = None,
    ) -> list[Position]:
        """The positions after each of `steps` batches: each row is the next best-fit row of the
        source `next_source` names (for one source: the next `rows`), in the order of its block's
        rows, block after block. Appends each run of rows taken from one block to `out` (and the
        block to `blocks`, its rows to `packed`) unless None."""
        finished, tokens, placed = position.counts()
        width = self.width
        positions = []
        for step in range(position.step, position.step + steps):
            if step in self._new_stage:
                tokens = [0] * len(tokens)
            weights = self._weights(step)
            mixed = len(weights) > 1
            row = 0
            while row < self._rows:
                k = next_source(weights, tokens, width) if mixed else 0
                block, _ = self._draws[k].unit(finished[k])
                rows = self._rows_of(k, block)
                r = placed[k]
                n = 1 if mixed else min(self._rows - row, len(rows) - r)
                tokens[k] += sum(rows.tokens[r : r + n])
                if out is not None:
                    out += (
                        k,
                        block.first,
                        r,
                        n,
                        ((step - position.step) * self._rows + row) * width,
                    )
                    blocks[(k, block.first)], packed[(k, block.first)] = block, rows
                row += n
                if r + n < len(rows):
                    placed[k] = r + n
                else:
                    finished[k], placed[k] = block.first + len(block.piece_first) - 1, 0
            positions.append(Position(step + 1, tuple(finished), tuple(tokens), tuple(placed)))
        return positions

    def _rows_of(self, source: int, block: UnitBlock) -> BestFitRows:
        """The best-fit rows of a block of `source`'s draws, packed once."""
        packed = self._packed[source]
        if block.first not in packed:
            if len(packed) == _PACKED:
                del packed[min(packed)]
            packed[block.first] = BestFitRows(block.lengths, self.width)
        return packed[block.first]

    def _first_fit(
        self,
        position: Position,
        steps: int,
        out: list[int] | None,
        blocks: dict[tuple[int, int], UnitBlock] | None,
    ) -> list[Position]:
        """The positions after each of `steps` batches: pieces placed first fit into the rows until
        one fits none, one piece at a time from the source `next_source` names for a mixture. One
        source's pieces are placed in draw order, a block of units at a time: a unit's pieces follow
        the one before's in its block. Appends each placed piece to `out` (and its block to
        `blocks`) unless None."""
        finished, tokens, placed = position.counts()
        width, batch = self.width, self._rows * self.width
        positions = []
        for step in range(position.step, position.step + steps):
            if step in self._new_stage:
                tokens = [0] * len(tokens)
            weights = self._weights(step)
            mixed = len(weights) > 1
            rows = FirstFitRows(self._rows, width, (step - position.step) * batch)
            while True:
                k = next_source(weights, tokens, width) if mixed else 0
                block, i = self._draws[k].unit(finished[k])
                first = block.piece_first[i] + placed[k]
                end = rows.place(
                    block.lengths,
                    first,
                    first + 1 if mixed else block.piece_first[-1],
                    out,
                    k,
                    block.first,
                )
                tokens[k] += sum(block.lengths[first:end])
                i = bisect.bisect_right(block.piece_first, end) - 1  # the unit in progress
                finished[k], placed[k] = block.first + i, end - block.piece_first[i]
                if out is not None and end > first:
                    blocks[(k, block.first)] = block
                if end == first or (not mixed and i < len(block.piece_first) - 1):
                    break
            positions.append(Position(step + 1, tuple(finished), tuple(tokens), tuple(placed)))
        return positions

    def _pieces_of_rows(
        self, out: list[int], packed: dict[tuple[int, int], BestFitRows]
    ) -> np.ndarray:
        """The pieces of the rows a best-fit walk took (`out`: source, block, first row, rows and
        dest of each run, from the blocks' `packed` rows), as a first-fit walk lists them."""
        runs = np.array(out, np.int64).reshape(-1, 5)
        placed = []
        for (k, first), rows in packed.items():
            mine = runs[(runs[:, 0] == k) & (runs[:, 1] == first)]
            n = mine[:, 3]
            rank = np.arange(int(n.sum())) - np.repeat(np.cumsum(n) - n, n)
            pieces, dest, segment = rows.placed(
                np.repeat(mine[:, 2], n) + rank, np.repeat(mine[:, 4], n) + rank * self.width
            )
            placed.append(
                np.stack(
                    [np.full(len(pieces), k), np.full(len(pieces), first), pieces, dest, segment], 1
                )
            )
        return np.concatenate(placed)

    def _document_plan(
        self, placed: np.ndarray, blocks: dict[tuple[int, int], UnitBlock]
    ) -> StepPlan:
        """The plan of the pieces a walk placed (`placed`: source, block, piece, dest, segment per
        row): each record's part of each, in order of `dest`."""
        parts = []
        for (k, first), block in blocks.items():
            mine = placed[(placed[:, 0] == k) & (placed[:, 1] == first)]
            which, record, start, length = block.parts(mine[:, 2])
            offset = np.cumsum(length) - length
            offset -= offset[np.searchsorted(which, which)]  # from the piece's first part
            parts.append(
                (
                    np.full(len(which), k),
                    record,
                    start,
                    length,
                    mine[which, 3] + offset,
                    mine[which, 4],
                )
            )
        source, record, start, length, dest, segment = (np.concatenate(c) for c in zip(*parts))
        order = np.argsort(dest)
        return StepPlan(
            source[order], record[order], start[order], length[order], dest[order], segment[order]
        )
