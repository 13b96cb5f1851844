"""Document packing's units: what each epoch draws, in a keyed order over the whole epoch.

A record's documents that fit a row (at most `seq_len` tokens) are one unit: one read of the record
gives them all, and they are packed first fit one after another. A longer document is cut into
`seq_len`-token pieces (the last shorter), and each piece is a unit of its own. An epoch draws every
unit of the source once, in a keyed order (`EpochOrder`, a bijection computed a block at a time),
so a long document's pieces land all over the epoch rather than in neighbouring rows, and a batch
holds the short documents of a few records among pieces of as many long ones.

Units are found from the lengths alone: the units before each record (`SplitLengths.units`, for
this `seq_len`) say which record a unit is in (the one its documents start in), and the lengths of
the documents that start in the record which of them or of their pieces it is. A document longer
than a record runs on into the records after it, and so may a piece of it.

The first fit that places pieces is sequential, but which pieces a draw holds is not: the units of
`DECODED` consecutive draws are found at once, with numpy, and the walk reads their pieces' lengths
from plain lists.
"""

from __future__ import annotations

import numpy as np

from pipeline.load.lengths import SplitLengths, by_shard
from pipeline.load.record_order import EndOfData, EpochOrder

DECODED = 1024  # draws whose units are found at once


class UnitBlock:
    """The units of draws [first, first + DECODED) of a source (fewer at an epoch's end).

    Unit `i` holds pieces `piece_first[i]` to `piece_first[i + 1]` (plain lists, for the first fit),
    each `lengths[p]` tokens from token `start[p]` of record `record[p]`, which is token `at[p]` of
    the split, in a record that ends at the split's token `end[p]` (a piece may run past it)."""

    __slots__ = (
        "first",
        "piece_first",
        "lengths",
        "record",
        "start",
        "length",
        "at",
        "end",
        "_split",
    )

    def __init__(
        self,
        first: int,
        piece_first: np.ndarray,
        record: np.ndarray,
        start: np.ndarray,
        length: np.ndarray,
        at: np.ndarray,
        end: np.ndarray,
        split: SplitLengths,
    ):
        self.first = first
        self.piece_first: list[int] = piece_first.tolist()
        self.lengths: list[int] = length.tolist()
        self.record, self.start, self.length, self.at, self.end = record, start, length, at, end
        self._split = split

    def parts(self, pieces: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Each record's part of these pieces, as arrays (index in `pieces`, record, token offset in
        it, tokens), in order; a piece that runs past its record's end comes as one part per
        record."""
        at, length = self.at[pieces], self.length[pieces]
        if (at + length > self.end[pieces]).any():
            return self._split.runs(at, length)
        return np.arange(len(pieces)), self.record[pieces], self.start[pieces], length


class DocumentUnits:
    """The units of one source, by draw: `unit(d)` is the block holding the `d`-th unit the run
    takes from it, and the unit's index in the block."""

    def __init__(
        self, lengths: SplitLengths, *, seq_len: int, seed: int, source: int, num_epochs: int | None
    ):
        self._lengths = lengths
        self._units, self._before = lengths.units(seq_len)
        self._offsets, self._token_before = lengths.offsets()
        self.count = int(self._before[-1])
        self._seq_len = seq_len
        self._order = EpochOrder(self.count, seed=seed, source=source)
        self._num_epochs = num_epochs
        self._blocks: tuple[UnitBlock, ...] = ()  # the last two decoded: a walk goes forward

    def unit(self, drawn: int) -> tuple[UnitBlock, int]:
        """Raises EndOfData past the last epoch asked for."""
        for block in self._blocks:
            if 0 <= drawn - block.first < len(block.piece_first) - 1:
                return block, drawn - block.first
        epoch, at = divmod(drawn, self.count)
        if self._num_epochs is not None and epoch >= self._num_epochs:
            raise EndOfData
        first = at - at % DECODED
        block = self._decode(epoch, first, min(first + DECODED, self.count))
        self._blocks = (block, *self._blocks[:1])
        return block, at - first

    def _decode(self, epoch: int, first: int, stop: int) -> UnitBlock:
        """The units at positions [first, stop) of epoch `epoch`."""
        lengths, size = self._lengths, self._seq_len
        units = self._order.records(epoch, first, stop)
        count = len(units)
        which, record, lead, first_doc, docs_in, begin, end = (
            np.empty(count, np.int64) for _ in range(7)
        )
        located = []
        for shard, idx in by_shard(units, self._before):
            shard_units = self._units[shard]
            local = units[idx] - self._before[shard]
            rec = shard_units.searchsorted(local, side="right") - 1
            which[idx] = local - shard_units[rec]
            record[idx] = lengths.starts[shard] + rec
            lead[idx] = lengths.lead[shard][rec] if lengths.lead else 0
            firsts = lengths.firsts[shard]
            first_doc[idx], docs_in[idx] = firsts[rec], firsts[rec + 1] - firsts[rec]
            offsets = self._offsets[shard]
            begin[idx] = self._token_before[shard] + offsets[rec]
            end[idx] = self._token_before[shard] + offsets[rec + 1]
            located.append((shard, idx))
        # The documents that start in each unit's record, unit after unit.
        doc_first = np.cumsum(docs_in) - docs_in
        unit_of = np.repeat(np.arange(count), docs_in)
        docs = np.empty(len(unit_of), np.int64)
        for shard, idx in located:
            n = docs_in[idx]
            ranks = np.arange(int(n.sum())) - np.repeat(np.cumsum(n) - n, n)
            docs[np.repeat(doc_first[idx], n) + ranks] = lengths.docs[shard][
                np.repeat(first_doc[idx], n) + ranks
            ]
        before = np.cumsum(docs) - docs
        doc_start = (
            lead[unit_of] + before - before[doc_first][unit_of]
        )  # from the record's first token
        long = docs > size
        shorts = np.add.reduceat((~long).astype(np.int64), doc_first)  # per unit's record
        short_unit = (shorts > 0) & (which == 0)
        # Any other unit: piece `which - (shorts > 0)` of its record's longer documents, in order.
        cuts = np.where(long, -(-docs // size), 0)
        through = np.cumsum(cuts)
        cut = np.flatnonzero(~short_unit)
        target = (through - cuts)[doc_first[cut]] + which[cut] - (shorts[cut] > 0)
        doc = np.searchsorted(through, target, side="right")
        piece = target - (through[doc] - cuts[doc])
        # The pieces unit after unit: a short unit's documents that fit a row, or that one piece.
        piece_first = np.concatenate(([0], np.cumsum(np.where(short_unit, shorts, 1))))
        short = np.ones(piece_first[-1], bool)
        short[piece_first[cut]] = False
        from_short = np.flatnonzero(~long & short_unit[unit_of])
        unit, start, length = (np.empty(len(short), np.int64) for _ in range(3))
        unit[short], unit[~short] = unit_of[from_short], cut
        start[short], start[~short] = doc_start[from_short], doc_start[doc] + piece * size
        length[short], length[~short] = docs[from_short], np.minimum(size, docs[doc] - piece * size)
        return UnitBlock(
            epoch * self.count + first,
            piece_first,
            record[unit],
            start,
            length,
            begin[unit] + start,
            end[unit],
            lengths,
        )
