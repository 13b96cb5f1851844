"""Unit-level pieces of prepare: record packing, per-unit shuffles and the split hash."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.prepare.tokenize.unit import shuffled_order, validation_mask
from schemas.records import record_bounds


@pytest.mark.parametrize("record_tokens", [16, 50, 1000])
def test_records_are_bounded_and_cut_only_documents_longer_than_the_bound(record_tokens):
    rng = np.random.default_rng(record_tokens)
    lengths = [int(x) for x in rng.integers(1, 3 * record_tokens, 200)]
    bounds = record_bounds(lengths, record_tokens)
    doc_starts = np.cumsum([0, *lengths[:-1]]).tolist()
    doc_ends = set(np.cumsum(lengths).tolist())
    assert bounds[0] == 0 and bounds[-1] == sum(lengths)
    assert all(0 < b - a <= record_tokens for a, b in zip(bounds, bounds[1:]))
    long_ones = [(s, n) for s, n in zip(doc_starts, lengths) if n > record_tokens]
    # A document longer than the bound is cut every record_tokens from its start, and its last part
    # is a record of its own; other boundaries fall between documents.
    cuts = {s + k for s, n in long_ones for k in range(record_tokens, n, record_tokens)}
    assert set(bounds[1:]) - doc_ends == cuts
    assert {s for s, _ in long_ones} <= set(bounds) and {s + n for s, n in long_ones} <= set(bounds)
    # Whole documents fill records greedily: the next one would not have fit, unless it is cut or
    # the record ends a cut one.
    length_at = dict(zip(doc_starts, lengths))
    for a, b in zip(bounds, bounds[1:-1]):
        if (
            b not in cuts
            and a not in cuts
            and length_at[b] <= record_tokens
            and length_at.get(a, 0) <= record_tokens
        ):
            assert (b - a) + length_at[b] > record_tokens


def test_record_bounds_fill_records_greedily():
    assert record_bounds([3, 3, 3], 6) == [0, 6, 9]
    assert record_bounds([7], 3) == [0, 3, 6, 7]
    assert record_bounds([2, 7, 1], 3) == [0, 2, 5, 8, 9, 10]
    assert record_bounds([7, 1, 3], 3) == [0, 3, 6, 7, 8, 11]
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
