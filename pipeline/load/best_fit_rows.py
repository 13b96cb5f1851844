"""Best-fit-decreasing rows: the pieces of a block of document units packed into rows of a width.

Document packing (`packing="document"`) packs each block of `DECODED` consecutive draws of a source
on its own: a full `seq_len` piece of a long document fills a row alone, and every other piece (a
long document's last piece, a document shorter than a row) goes, longest first, into the row with
the least room that still holds it, or a new row. This is the best-fit-decreasing packing of "Fewer
Truncations Improve Language Modeling" (Ding et al., 2024) over a block of draws rather than a
buffer of chunks, so its rows are a function of the block alone: the plan's position stays a count
of draws and of rows taken of the block in progress, and a run resumes anywhere in milliseconds.

A block's shared pieces (those shorter than a row) are packed in groups of consecutive draws of
about `GROUP_ROWS` rows' worth: a row then holds documents of a few neighbouring records, not of
any of the block's thousand, and a window of steps reads about as many records as first fit does
(packed whole, a block of ~200-token stories made each window read seven times as many, and the
loader without workers about half as fast). A group leaves about half a row of padding, a 500th of
its rows. Web pages'
last pieces are few: their groups are whole blocks.

The rows come in the order of the first draw each holds, so a batch keeps the epoch's keyed order
(a long document's full pieces land all over it) instead of all full pieces first.
"""

from __future__ import annotations

import bisect
import itertools

import numpy as np

__all__ = ["BestFitRows"]


GROUP_ROWS = 256  # rows' worth of shared pieces packed together


def _best_fit_decreasing(
    lengths: list[int], by_length: list[int], width: int, rows: list[list[int]]
) -> None:
    """Appends to `rows` the rows that pieces `by_length` (longest first) fill, each piece in the
    row with the least room that holds it (of those, the last to come to that room), else a new
    one."""
    # Rows by their room: at most `width` distinct values, so the sorted list of those present
    # stays short however many rows are open.
    having: dict[int, list[int]] = {}  # room -> the rows with that much room
    rooms: list[int] = []  # the keys of `having`, ascending
    # The row filled last, filed under its room only when a piece of another length comes: no row
    # has room between a length and the room that row had, so while it holds the next piece of the
    # same length, it is that piece's row.
    last, left, last_n = -1, 0, 0
    for piece in by_length:
        n = lengths[piece]
        if n != last_n or left < n:
            if left:
                if left in having:
                    having[left].append(last)
                else:
                    having[left] = [last]
                    bisect.insort(rooms, left)
            if not rooms or rooms[-1] < n:
                last, left = len(rows), width
                rows.append([])
            else:
                at = bisect.bisect_left(rooms, n)
                left = rooms[at]
                same = having[left]
                last = same.pop()
                if not same:
                    del having[left], rooms[at]
            last_n = n
        rows[last].append(piece)
        left -= n


class BestFitRows:
    """Rows of width `width` holding pieces `lengths` (each at most `width`): row `r` holds the
    pieces `pieces[first[r]:first[r + 1]]` (indices into `lengths`, longest first), each from token
    `offset` of the row with segment id `segment`, and `tokens[r]` tokens in all. `tokens` is a
    plain list (the plan's walk reads it a row at a time), the rest int64 arrays."""

    __slots__ = ("first", "pieces", "offset", "segment", "tokens")

    def __init__(self, lengths: list[int], width: int, *, group_rows: int = GROUP_ROWS):
        size = np.asarray(lengths, np.int64)
        # Each group of pieces is packed on its own: a new group starts where the pieces that share
        # rows reach `group_rows` rows' worth of tokens.
        shared = np.where(size < width, size, 0)
        group = (np.cumsum(shared) - shared) // (group_rows * width)
        starts = np.flatnonzero(np.diff(group, prepend=-1)).tolist()
        rows: list[list[int]] = []
        for begin, end in zip(starts, [*starts[1:], len(lengths)]):
            by_length = begin + np.argsort(-size[begin:end], kind="stable")
            _best_fit_decreasing(lengths, by_length.tolist(), width, rows)
        counts = np.fromiter(map(len, rows), np.int64, len(rows))
        pieces = np.fromiter(itertools.chain.from_iterable(rows), np.int64, int(counts.sum()))
        first = np.cumsum(counts) - counts
        order = np.argsort(np.minimum.reduceat(pieces, first), kind="stable")  # by first draw
        counts = counts[order]
        self.first = np.concatenate(([0], np.cumsum(counts)))
        rank = np.arange(self.first[-1]) - np.repeat(self.first[:-1], counts)
        self.pieces = pieces[np.repeat(first[order], counts) + rank]
        self.segment = rank + 1
        before = np.cumsum(size[self.pieces]) - size[self.pieces]
        self.offset = before - np.repeat(before[self.first[:-1]], counts)
        self.tokens: list[int] = np.add.reduceat(size[self.pieces], self.first[:-1]).tolist()

    def placed(self, rows: np.ndarray, dest: np.ndarray) -> tuple[np.ndarray, ...]:
        """The pieces of rows `rows`, row `rows[i]` placed at flat offset `dest[i]`: each piece's
        index, flat offset and segment id."""
        counts = self.first[rows + 1] - self.first[rows]
        at = np.repeat(self.first[rows] - np.cumsum(counts) + counts, counts) + np.arange(
            int(counts.sum())
        )
        return self.pieces[at], np.repeat(dest, counts) + self.offset[at], self.segment[at]

    def __len__(self) -> int:
        return len(self.tokens)
