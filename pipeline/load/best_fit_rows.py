"""Best-fit-decreasing rows: the pieces of a block of document units packed into rows of a width.

Document packing (`packing="document"`) packs each block of `DECODED` consecutive draws of a source
on its own: a full `seq_len` piece of a long document fills a row alone, and every other piece (a
long document's last piece, a document shorter than a row) goes, longest first, into the row with
the least room that still holds it, or a new row. This is the best-fit-decreasing packing of "Fewer
Truncations Improve Language Modeling" (Ding et al., 2024) over a block of draws rather than a
buffer of chunks, so its rows are a function of the block alone: the plan's position stays a count
of draws and of rows taken of the block in progress, and a run resumes anywhere in milliseconds.

The rows come in the order of the first draw each holds, so a batch keeps the epoch's keyed order
(a long document's full pieces land all over it) instead of all full pieces first.
"""

from __future__ import annotations

import bisect

import numpy as np

__all__ = ["BestFitRows"]


class BestFitRows:
    """Rows of width `width` holding pieces `lengths` (each at most `width`): row `r` holds the
    pieces `pieces[first[r]:first[r + 1]]` (indices into `lengths`, longest first), each from token
    `offset` of the row with segment id `segment`, and `tokens[r]` tokens in all. `tokens` is a
    plain list (the plan's walk reads it a row at a time), the rest int64 arrays."""

    __slots__ = ("first", "pieces", "offset", "segment", "tokens")

    def __init__(self, lengths: list[int], width: int):
        size = np.asarray(lengths, np.int64)
        rows: list[list[int]] = []
        # Rows by their room: at most `width` distinct values, so the sorted list of those present
        # stays short however many rows are open.
        having: dict[int, list[int]] = {}  # room -> the rows with that much room
        rooms: list[int] = []  # the keys of `having`, ascending
        for piece in np.argsort(-size, kind="stable").tolist():
            n = lengths[piece]
            at = bisect.bisect_left(rooms, n)
            if at == len(rooms):
                row, left = len(rows), width - n
                rows.append([piece])
            else:
                had = rooms[at]
                same = having[had]
                row, left = same.pop(), had - n
                if not same:
                    del having[had], rooms[at]
                rows[row].append(piece)
            if left:
                if left in having:
                    having[left].append(row)
                else:
                    having[left] = [row]
                    bisect.insort(rooms, left)
        counts = np.array([len(row) for row in rows], np.int64)
        pieces = np.fromiter((p for row in rows for p in row), np.int64, int(counts.sum()))
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
