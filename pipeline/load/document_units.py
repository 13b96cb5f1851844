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
"""

from __future__ import annotations

import bisect
from itertools import accumulate

from pipeline.load.lengths import SplitLengths
from pipeline.load.record_order import EndOfData, EpochOrder


class DocumentUnits:
    """The units of one source, by draw: (record, start and length of each piece, whether a piece
    runs past the record's end) of the `drawn`-th unit the run takes from it. Pieces are documents,
    or `seq_len`-token pieces of a longer one; starts count from the record's first token."""

    def __init__(self, lengths: SplitLengths, *, seq_len: int, seed: int, source: int, num_epochs: int | None):
        self._lengths = lengths
        self._units, self._before = lengths.units(seq_len)
        self._offsets = lengths.offsets()[0]
        self.count = int(self._before[-1])
        self._seq_len = seq_len
        self._order = EpochOrder(self.count, seed=seed, source=source)
        self._num_epochs = num_epochs

    def unit(self, drawn: int) -> tuple[int, list[int], list[int], bool]:
        epoch, at = divmod(drawn, self.count)
        if self._num_epochs is not None and epoch >= self._num_epochs:
            raise EndOfData
        unit = self._order.record(epoch, at)
        shard = bisect.bisect_right(self._before, unit) - 1
        units = self._units[shard]
        local = unit - self._before[shard]
        record = int(units.searchsorted(local, side="right")) - 1
        which = local - int(units[record])
        lengths = self._lengths
        firsts = lengths.firsts[shard]
        docs = lengths.docs[shard][int(firsts[record]) : int(firsts[record + 1])].tolist()
        size = self._seq_len
        split_record = int(lengths.starts[shard]) + record
        starts = list(accumulate(docs[:-1], initial=lengths.lead_of(shard, record)))
        spills = starts[-1] + docs[-1] > self._record_tokens(shard, record)
        if max(docs) <= size:  # the common case: one unit of whole documents
            return split_record, starts, docs, spills
        short = [(s, n) for s, n in zip(starts, docs) if n <= size]
        if short:
            if which == 0:
                return split_record, [s for s, _ in short], [n for _, n in short], spills
            which -= 1
        for start, n in zip(starts, docs):
            if n > size:
                pieces = -(-n // size)
                if which < pieces:
                    return split_record, [start + which * size], [min(size, n - which * size)], spills
                which -= pieces
        raise AssertionError(f"unit {unit} is past the units of record {split_record}")

    def _record_tokens(self, shard: int, record: int) -> int:
        offsets = self._offsets[shard]
        return int(offsets[record + 1]) - int(offsets[record])
