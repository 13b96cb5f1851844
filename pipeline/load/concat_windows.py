"""Concat packing's windows: each epoch's token stream cut into windows of `seq_len + 1` tokens, drawn
in a keyed order over the whole epoch.

A source's stream runs through the run epoch after epoch. Epoch `e` is the split's records in
manifest order, read from a keyed token offset round to it (`rotation`), so each epoch cuts its
windows elsewhere. The stream is cut into windows of `W = seq_len + 1` tokens from the run's start,
and epoch `e`'s windows are those that start in it: they are drawn in a keyed order
(`EpochOrder`, a bijection computed a block at a time), all but the one that runs into the next
epoch, which is drawn last. So every token of an epoch is read exactly once before any repeats
(only the draw that ends an epoch reaches into the next), and consecutive rows are windows from
anywhere in the epoch, not one document's consecutive windows.

What a window holds comes from the lengths alone: the tokens before each record
(`SplitLengths.offsets`) say which records, and where in them, a window's tokens lie.
"""

from __future__ import annotations

from pipeline.load.lengths import SplitLengths
from pipeline.load.record_order import EndOfData, EpochOrder, rotation


class ConcatWindows:
    """The windows of one source, by draw: the `drawn`-th window the run takes from it."""

    def __init__(self, lengths: SplitLengths, *, seq_len: int, seed: int, source: int, num_epochs: int | None):
        self._lengths = lengths
        self.tokens = int(lengths.offsets()[1][-1])
        self.width = seq_len + 1
        self._seed, self._source = seed, source
        self._order = EpochOrder(max(1, self.tokens // self.width), seed=seed, source=source)
        self._num_epochs = num_epochs
        self._rotations: dict[int, int] = {}

    def _epoch(self, drawn: int) -> tuple[int, int, int, int]:
        """(epoch, its first window, the windows wholly inside it, this draw's place in it)."""
        width, tokens = self.width, self.tokens
        epoch = drawn * width // tokens
        first = -(-epoch * tokens // width)
        return epoch, first, (epoch + 1) * tokens // width - first, drawn - first

    def check(self, drawn: int) -> None:
        """Raises EndOfData if the window reaches past the last epoch asked for."""
        if self._num_epochs is None:
            return
        epoch, _, inside, at = self._epoch(drawn)
        if epoch >= self._num_epochs or (epoch == self._num_epochs - 1 and at == inside):
            raise EndOfData

    def window(self, drawn: int) -> int:
        """The run stream's window (the `w` of tokens [w * W, (w + 1) * W)) drawn after `drawn` others."""
        epoch, first, inside, at = self._epoch(drawn)
        return first + (self._order.record(epoch, at, inside) if at < inside else inside)

    def pieces(self, drawn: int) -> list[tuple[int, int, int]]:
        """(record, token offset in it, tokens) of each run of the window that lies in one record, in order."""
        self.check(drawn)
        tokens, out = self.tokens, []
        at = self.window(drawn) * self.width
        end = at + self.width
        while at < end:
            epoch, offset = divmod(at, tokens)
            if epoch not in self._rotations:
                self._rotations = {epoch: rotation(tokens, seed=self._seed, source=self._source, epoch=epoch)}
            stored = (offset + self._rotations[epoch]) % tokens
            take = min(end - at, tokens - offset)
            while take:  # the epoch's stream turns round the split's end at most once
                n = min(take, tokens - stored)
                out += self._lengths.runs(stored, n)
                stored, take, at = 0, take - n, at + n
        return out
