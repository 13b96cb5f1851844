"""Best-fit-decreasing rows: the pieces of a block of document units packed into rows of a width.

Document packing (`packing="document"`) packs each block of `DECODED` consecutive draws of a source
on its own: a full `seq_len` piece of a long document fills a row alone, and every other piece (a
long document's last piece, a document shorter than a row) goes, longest first, into the row with
the least room that still holds it, or a new row. This is the best-fit-decreasing packing of "Fewer
Truncations Improve Language Modeling" (Ding et al., 2024) over a block of draws rather than a
buffer of chunks, so its rows are a function of the block alone: the plan's position stays a count
of draws and of rows taken of the block in progress, and a run resumes anywhere in milliseconds.

A block's shared pieces (those shorter than a row) are packed in groups of consecutive draws of
about `GROUP_ROWS` rows' worth, so that a row holds documents of a few neighbouring records: a
window of 32 steps of ~200-token stories reads a sixth more records than first fit (a block packed
whole made it read seven times as many, groups of 256 rows 30% more), and, where the window before
was read in the same process, about as many (`host_rows` keeps that window's records). The row a
group leaves less than half full (there is at most one: a row opened later held a piece longer
than the room of every row before it) is not closed: its pieces go on to the next group, so the
block pads only where its last group ends and in the small gaps best fit leaves.

A row's pieces lie in draw order, and the rows come in the order of the last draw each holds: a
batch keeps the epoch's keyed order (a long document's full pieces land all over it, not all
first), and a record's documents that share a row lie side by side, as in the record.
"""

from __future__ import annotations

import bisect

import numpy as np

__all__ = ["BestFitRows"]


GROUP_ROWS = 64  # rows' worth of shared pieces packed together


def _best_fit_decreasing(sizes: list[int], width: int) -> tuple[list[int], list[int]]:
    """The row of each piece of `sizes` (longest first) and the room each row has left: each piece
    goes into the row with the least room that holds it (of those, the last to come to that room),
    else a new one."""
    row_of: list[int] = []
    room: list[int] = []
    # Rows by their room, as a stack per room threaded through `below`: no list is made per room,
    # so a block's packing leaves the garbage collector nothing to scan.
    top = [-1] * (width + 1)  # room -> the row that came to it last, or -1
    below: list[int] = []  # row -> the row that came to its room before it, or -1
    rooms: list[int] = []  # the rooms some row has, ascending
    # The row filled last, filed under its room only when a piece of another length comes: no row
    # has room between a length and the room that row had, so while it holds the next piece of the
    # same length, it is that piece's row.
    last, left, last_n = -1, 0, 0
    for n in sizes:
        if n != last_n or left < n:
            if left:
                if top[left] < 0:
                    bisect.insort(rooms, left)
                below[last], top[left] = top[left], last
            if not rooms or rooms[-1] < n:
                last, left = len(room), width
                room.append(width)
                below.append(-1)
            else:
                at = bisect.bisect_left(rooms, n)
                left = rooms[at]
                last = top[left]
                top[left] = below[last]
                if top[left] < 0:
                    del rooms[at]
            last_n = n
        row_of.append(last)
        left -= n
        room[last] = left
    return row_of, room


class BestFitRows:
    """Rows of width `width` holding pieces `lengths` (each at most `width`): row `r` holds the
    pieces `pieces[first[r]:first[r + 1]]` (indices into `lengths`, in draw order), each from token
    `offset` of the row with segment id `segment`, and `tokens[r]` tokens in all. `tokens` is a
    plain list (the plan's walk reads it a row at a time), the rest int64 arrays."""

    __slots__ = ("first", "pieces", "offset", "segment", "tokens")

    def __init__(self, lengths: list[int], width: int, *, group_rows: int = GROUP_ROWS):
        size = np.asarray(lengths, np.int64)
        row_of = np.arange(len(size))  # a full piece is a row; shared rows are numbered after
        rows = len(size)
        shared = np.flatnonzero(size < width)
        group = (np.cumsum(size[shared]) - size[shared]) // (group_rows * width)
        bounds = [*np.flatnonzero(np.diff(group, prepend=-1)).tolist(), len(shared)]
        carried = shared[:0]
        for begin, end in zip(bounds, bounds[1:]):
            pieces = np.concatenate((carried, shared[begin:end]))
            pieces = pieces[np.argsort(-size[pieces], kind="stable")]
            row, room = _best_fit_decreasing(size[pieces].tolist(), width)
            row = np.array(row, np.int64)
            # The row less than half full waits for the next group's pieces, if any come.
            wait = (2 * np.array(room) > width)[row] & (end < len(shared))
            row_of[pieces] = rows + row
            rows += len(room)
            carried = np.sort(pieces[wait])
        by_row = np.lexsort((np.arange(len(size)), row_of))  # each row's pieces in draw order
        starts = np.flatnonzero(np.diff(row_of[by_row], prepend=-1))
        counts = np.diff([*starts.tolist(), len(size)])
        order = np.argsort(by_row[starts + counts - 1])  # rows by their last draw
        counts = counts[order]
        self.first = np.concatenate(([0], np.cumsum(counts)))
        rank = np.arange(self.first[-1]) - np.repeat(self.first[:-1], counts)
        self.pieces = by_row[np.repeat(starts[order], counts) + rank]
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
