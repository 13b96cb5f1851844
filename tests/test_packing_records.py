"""Unit-level pieces of prepare: record packing, per-unit shuffles and the split hash."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.prepare.worker import shuffled_order, validation_mask
from schemas.records import record_bounds


@pytest.mark.parametrize("record_tokens", [16, 50, 1000])
def test_records_hold_whole_documents_and_only_long_ones_exceed_the_bound(record_tokens):
    rng = np.random.default_rng(record_tokens)
    lengths = [int(x) for x in rng.integers(1, 3 * record_tokens, 200)]
    bounds = record_bounds(lengths, record_tokens)
    doc_ends = set(np.cumsum(lengths).tolist())
    assert bounds[0] == 0 and bounds[-1] == sum(lengths)
    assert set(bounds[1:]) <= doc_ends, "a record boundary inside a document"
    for a, b in zip(bounds, bounds[1:]):
        inside = [e for e in doc_ends if a < e <= b]
        # Over the bound only as a record of one document; records are filled greedily.
        assert b - a <= record_tokens or len(inside) == 1
    for a, b, c in zip(bounds, bounds[1:], bounds[2:]):
        next_doc = min(e for e in doc_ends if e > b) - b
        assert (b - a) + next_doc > record_tokens, "the next document would have fit"


def test_record_bounds_fill_records_greedily():
    assert record_bounds([3, 3, 3], 6) == [0, 6, 9]
    assert record_bounds([7], 3) == [0, 7]
    assert record_bounds([2, 7, 1], 3) == [0, 2, 9, 10]
    assert record_bounds([], 8) == [0]


def test_shuffled_order_is_a_seeded_permutation():
    a = shuffled_order(1000, seed=1, unit_index=3, batch=0, split="train")
    assert sorted(a.tolist()) == list(range(1000))
    assert np.array_equal(a, shuffled_order(1000, seed=1, unit_index=3, batch=0, split="train"))
    assert not np.array_equal(a, shuffled_order(1000, seed=1, unit_index=4, batch=0, split="train"))
    assert not np.array_equal(a, shuffled_order(1000, seed=1, unit_index=3, batch=1, split="train"))
    assert not np.array_equal(a, shuffled_order(1000, seed=2, unit_index=3, batch=0, split="train"))


def test_validation_mask_fraction_and_salt():
    texts = [f"document {i}" for i in range(20000)]
    mask = validation_mask(texts, 0.1, seed=0)
    assert abs(mask.mean() - 0.1) < 0.01
    assert not validation_mask(texts, 0.0, seed=0).any()
    assert (mask != validation_mask(texts, 0.1, seed=1)).any()
