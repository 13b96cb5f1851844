"""The order in which an epoch draws a source's units (its windows for concat packing, its records'
short documents and its long documents' pieces for document packing): a keyed bijection, computed,
never stored.

A drawn permutation holds 4 bytes per record in memory and takes seconds per 10^7 records to draw,
once per source and epoch, at start-up and at every epoch's start: minutes and gigabytes at 10^9
records. Here position `i` of epoch `e` maps to a record by a Feistel network over the smallest
power-of-four domain that holds the records, keyed by (seed, source, epoch), with cycle walking
(a value at or past the record count is mapped again until it falls inside): a bijection of
[0, records) whatever the keys, so an epoch still reads every record exactly once. Looking up a
position costs a few integer mixes and nothing depends on how far the run has gone; the planner
asks for positions in order, so it computes them a block at a time with numpy.
"""

from __future__ import annotations

import numpy as np

from pipeline.splitmix import splitmix64


class EndOfData(Exception):
    """The plan needs a unit of an epoch past the last one asked for."""


_ROUNDS = 6  # Feistel rounds: 4 make a strong pseudo-random permutation; 2 more for small domains
BLOCK = 4096  # positions computed at once by `EpochOrder`


def _key(seed: int, source: int, epoch: int) -> np.uint64:
    state = np.uint64(0)
    for value in (seed, source, epoch):
        state = splitmix64(state ^ np.uint64(value))
    return state


def _round_keys(seed: int, source: int, epoch: int) -> list[np.uint64]:
    keys, state = [], _key(seed, source, epoch)
    for _ in range(_ROUNDS):
        state = splitmix64(state)
        keys.append(state)
    return keys


def permuted(
    positions: np.ndarray, records: int, *, seed: int, source: int, epoch: int
) -> np.ndarray:
    """The records (int64) read at `positions` of epoch `epoch` of source `source`."""
    if records < 1:
        raise ValueError(f"a source has no records to order (records={records})")
    half = (max(1, (records - 1).bit_length()) + 1) // 2
    mask = np.uint64((1 << half) - 1)
    shift = np.uint64(half)
    keys = _round_keys(seed, source, epoch)

    def feistel(x: np.ndarray) -> np.ndarray:
        left, right = x >> shift, x & mask
        for key in keys:
            left, right = right, left ^ (splitmix64(right ^ key) & mask)
        return (left << shift) | right

    x = feistel(np.asarray(positions, np.uint64))
    outside = np.flatnonzero(x >= np.uint64(records))
    while len(outside):
        x[outside] = feistel(x[outside])
        outside = outside[x[outside] >= np.uint64(records)]
    return x.astype(np.int64)


def permutation(records: int, *, seed: int, source: int, epoch: int) -> np.ndarray:
    """The whole order of epoch `epoch` of source `source`: the records in the order it reads
    them."""
    return permuted(
        np.arange(records, dtype=np.uint64), records, seed=seed, source=source, epoch=epoch
    )


def rotation(size: int, *, seed: int, source: int, epoch: int) -> int:
    """A keyed offset in [0, size) for epoch `epoch` of source `source`, apart from its order's
    keys: where concat packing starts cutting the epoch's token stream, so each epoch's windows are
    cut elsewhere."""
    return int(splitmix64(_key(seed, source, epoch) ^ np.uint64(0x5EED0FF5E7)) % np.uint64(size))


class EpochOrder:
    """`records(epoch, start, stop)`: the units at positions [start, stop) of an epoch of one
    source, computed `BLOCK` positions at a time. An epoch may order another number of units than
    `records` (`size`): concat packing's epochs hold a number of windows that depends on where the
    epoch's first one starts."""

    def __init__(self, records: int, *, seed: int, source: int):
        self._records = records
        self._seed = seed
        self._source = source
        self._block: tuple[int, int, int, np.ndarray] | None = (
            None  # (epoch, first position, size, its records)
        )

    def records(self, epoch: int, start: int, stop: int, size: int | None = None) -> np.ndarray:
        size = self._records if size is None else size
        parts = []
        while start < stop:
            first = start - start % BLOCK
            if self._block is None or self._block[:3] != (epoch, first, size):
                positions = np.arange(first, min(first + BLOCK, size), dtype=np.uint64)
                order = permuted(positions, size, seed=self._seed, source=self._source, epoch=epoch)
                self._block = epoch, first, size, order
            end = min(stop, first + BLOCK)
            parts.append(self._block[3][start - first : end - first])
            start = end
        return (
            parts[0]
            if len(parts) == 1
            else np.concatenate(parts)
            if parts
            else np.empty(0, np.int64)
        )
