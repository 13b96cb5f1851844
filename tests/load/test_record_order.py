"""The epoch's record order: a keyed bijection, the same computed whole or a block at a time."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.load.record_order import BLOCK, EpochOrder, permutation, permuted


@pytest.mark.parametrize("records", [1, 2, 3, 5, 64, 1000, BLOCK + 17, 2**16 + 1])
def test_every_epoch_reads_every_record_once(records):
    for seed, epoch in ((0, 0), (7, 3)):
        order = permutation(records, seed=seed, source=1, epoch=epoch)
        assert order.dtype == np.int64
        np.testing.assert_array_equal(np.sort(order), np.arange(records))


def test_seed_source_and_epoch_each_change_the_order_and_nothing_else_does():
    first = permutation(5000, seed=0, source=0, epoch=0)
    np.testing.assert_array_equal(first, permutation(5000, seed=0, source=0, epoch=0))
    others = [
        permutation(5000, seed=1, source=0, epoch=0),
        permutation(5000, seed=0, source=1, epoch=0),
        permutation(5000, seed=0, source=0, epoch=1),
    ]
    for other in others:
        assert np.mean(other == first) < 0.01


def test_the_order_is_shuffled_not_merely_permuted():
    # Neither the record number nor a neighbour's says where a record is read.
    order = permutation(20_000, seed=3, source=0, epoch=0).astype(float)
    positions = np.arange(len(order), dtype=float)
    assert abs(np.corrcoef(positions, order)[0, 1]) < 0.03
    assert abs(np.corrcoef(order[:-1], order[1:])[0, 1]) < 0.03
    # Each tenth of the epoch draws about a tenth of every tenth of the records.
    counts = np.histogram2d(positions, order, bins=10)[0]
    assert counts.min() > 0.8 * counts.mean() and counts.max() < 1.2 * counts.mean()


def test_positions_looked_up_a_block_at_a_time_match_the_whole_order():
    records = 3 * BLOCK + 5
    whole = permutation(records, seed=2, source=4, epoch=1)
    order = EpochOrder(records, seed=2, source=4)
    for start, stop in (
        (0, 1),
        (BLOCK - 3, BLOCK + 2),
        (5, 2 * BLOCK + 9),
        (records - 1, records),
        (7, 7),
    ):
        np.testing.assert_array_equal(order.records(1, start, stop), whole[start:stop])
    np.testing.assert_array_equal(
        order.records(0, 5, 6), permutation(records, seed=2, source=4, epoch=0)[5:6]
    )
    np.testing.assert_array_equal(
        permuted(np.array([7, 3], np.uint64), records, seed=2, source=4, epoch=1), whole[[7, 3]]
    )
