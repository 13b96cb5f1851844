"""Concat packing's windows: each epoch's token stream cut into windows of `seq_len + 1` tokens,
drawn in a keyed order over the whole epoch.

A source's stream runs through the run epoch after epoch. Epoch `e` is the split's records in
manifest order, read from a keyed token offset round to it (`rotation`), so each epoch cuts its
windows elsewhere. The stream is cut into windows of `W = seq_len + 1` tokens from the run's start,
and epoch `e`'s windows are those that start in it: they are drawn in a keyed order
(`EpochOrder`, a bijection computed a block at a time), all but the one that runs into the next
epoch, which is drawn last. So every token of an epoch is read exactly once before any repeats
(only the draw that ends an epoch reaches into the next), and consecutive rows are windows from
anywhere in the epoch, not one document's consecutive windows.

The `d`-th window a source gives is a function of `d` alone, so the windows of many draws are
found at once, with numpy: which records, and where in them, a window's tokens lie comes from the
lengths alone (`SplitLengths.runs`, over the tokens before each record).
"""

from __future__ import annotations

import numpy as np

from pipeline.load.lengths import SplitLengths
from pipeline.load.record_order import EndOfData, EpochOrder, rotation


class ConcatWindows:
    """The windows of one source, by draw: the `d`-th window the run takes from it.

    `limit`: the draws that `num_epochs` allows (None: no end). The last window an epoch draws runs
    on into the next epoch, so draw `d` is allowed while it starts before the end of the last epoch.
    """

    def __init__(
        self, lengths: SplitLengths, *, seq_len: int, seed: int, source: int, num_epochs: int | None
    ):
        self._lengths = lengths
        self.tokens = int(lengths.offsets()[1][-1])
        self.width = seq_len + 1
        self._seed, self._source = seed, source
        self._order = EpochOrder(max(1, self.tokens // self.width), seed=seed, source=source)
        self.limit = None if num_epochs is None else num_epochs * self.tokens // self.width
        self._rotations: dict[int, int] = {}

    def windows(self, first: int, count: int) -> np.ndarray:
        """The run stream's windows (`w`: tokens [w * W, (w + 1) * W)) of draws
        [first, first + count)."""
        width, tokens = self.width, self.tokens
        out, drawn = [], first
        while drawn < first + count:
            epoch = drawn * width // tokens
            start = -(-epoch * tokens // width)  # the epoch's first window
            inside = (epoch + 1) * tokens // width - start  # its windows that end in it
            stop = min(first + count, -(-(epoch + 1) * tokens // width)) - start  # past its draws
            out.append(start + self._order.records(epoch, drawn - start, min(stop, inside), inside))
            if stop > inside:  # the window that runs into the next epoch, drawn last
                out.append(np.array([start + inside], np.int64))
            drawn = start + stop
        return out[0] if len(out) == 1 else np.concatenate(out)

    def pieces(
        self, first: int, count: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Each run of the windows of draws [first, first + count) that lies in one record, as
        arrays (draw - first, record, token offset in it, tokens), in draw order, each window's in
        order. Raises EndOfData if a window reaches past the last epoch asked for."""
        if self.limit is not None and first + count > self.limit:
            raise EndOfData
        tokens, width = self.tokens, self.width
        which = np.arange(count)
        at = self.windows(first, count) * width
        length = np.full(count, width, np.int64)
        # Where each window lies in the split's stored order: an epoch is the split rotated, so a
        # window is cut where the rotated stream turns round the split's end and where the epoch
        # ends (another rotation follows).
        cuts = []
        while len(which):
            epoch, offset = np.divmod(at, tokens)
            stored = (offset + self._rotation(epoch)) % tokens
            take = np.minimum(length, tokens - np.maximum(offset, stored))
            cuts.append((which, stored, take))
            more = take < length
            which, at, length = which[more], at[more] + take[more], length[more] - take[more]
        which, stored, take = (np.concatenate(c) for c in zip(*cuts)) if len(cuts) > 1 else cuts[0]
        if len(cuts) > 1:  # the cuts of a window in order
            order = np.argsort(which, kind="stable")
            which, stored, take = which[order], stored[order], take[order]
        run, record, start, length = self._lengths.runs(stored, take)
        return which[run], record, start, length

    def _rotation(self, epochs: np.ndarray) -> np.ndarray:
        """Each epoch's rotation, kept for the epochs of the last call (the windows of a few steps
        lie in one epoch or two)."""
        self._rotations = {
            epoch: self._rotations.get(epoch)
            or rotation(self.tokens, seed=self._seed, source=self._source, epoch=epoch)
            for epoch in np.unique(epochs).tolist()
        }
        if len(self._rotations) == 1:
            return np.int64(next(iter(self._rotations.values())))
        return np.array([self._rotations[e] for e in epochs.tolist()], np.int64)
