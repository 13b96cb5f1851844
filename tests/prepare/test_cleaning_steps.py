"""The cleaning stage's steps are plain functions: run here in memory, without Beam, on hand-made
fingerprints, they remove what the stage's rules say: a later exact copy (naming its first copy), a
document holding a leaked eval n-gram, and nothing for an n-gram common in the corpus."""

from __future__ import annotations

import collections

import numpy as np
import pytest

from pipeline.prepare.clean.decontamination.eval_matches import (
    add_counts,
    common_ngrams,
    contaminated,
)
from pipeline.prepare.clean.dedup.key_buckets import (
    bucket_count,
    bucket_duplicates,
    unit_keys,
)
from pipeline.prepare.clean.removals import CONTAMINATED, EXACT, removal_entries
from pipeline.prepare.clean.unit_fingerprints import UnitFingerprints

A, B, C = (np.array(key, dtype=np.uint64) for key in ([7, 1], [8, 2], [9, 3]))


def fingerprints(
    unit: int, keys: list[np.ndarray], evals: dict[int, list[int]]
) -> UnitFingerprints:
    """A unit whose document `i` has exact key `keys[i]`, and the eval n-grams `evals[i]` (all of
    the first eval file)."""
    hits = [np.array(evals[n], dtype=np.int64) for n in sorted(evals)]
    all_hits = np.concatenate(hits) if hits else np.zeros(0, dtype=np.int64)
    return UnitFingerprints(
        unit=unit,
        documents=len(keys),
        locations=np.arange(len(keys), dtype=np.int64) * 100,
        ids=None,
        exact_numbers=np.arange(len(keys), dtype=np.int64),
        exact_keys=np.stack(keys),
        near_numbers=np.zeros(0, dtype=np.int64),
        near_keys=np.zeros((0, 0), dtype=np.uint64),
        eval_numbers=np.array(sorted(evals), dtype=np.int64),
        eval_offsets=np.concatenate(([0], np.cumsum([len(h) for h in hits], dtype=np.int64))),
        eval_hits=all_hits,
        eval_files=np.zeros(len(all_hits), dtype=np.int64),
    )


def clean(units: list[UnitFingerprints], max_matches: int, buckets: int) -> dict[int, list[dict]]:
    """Every step of the stage in turn, as its Beam job strings them, per unit its removal
    entries."""
    common = common_ngrams(add_counts([u.eval_counts() for u in units]), max_matches)
    removed = {u.unit: contaminated(u, common) for u in units}
    grouped = collections.defaultdict(list)
    for u in units:
        for key, part in unit_keys(u.unit, u, removed[u.unit], buckets):
            grouped[key].append(part)
    candidates = collections.defaultdict(list)
    for (kind, _), parts in grouped.items():
        for unit, found in bucket_duplicates(kind, parts).items():
            candidates[unit] += found
    return {u.unit: removal_entries(candidates[u.unit], removed[u.unit], u.filtered) for u in units}


@pytest.mark.parametrize("buckets", [1, 2, 5])
def test_later_copies_and_leaks_are_removed_whatever_the_buckets(buckets):
    units = [fingerprints(0, [A, B, C], {}), fingerprints(1, [A, C, B], {2: [4]})]
    entries = clean(units, max_matches=1, buckets=buckets)
    assert entries[0] == []
    assert sorted(entries[1], key=lambda e: e["number"]) == [
        {"number": 0, "reason": EXACT, "keeper": [0, 0]},
        {"number": 1, "reason": EXACT, "keeper": [0, 200]},
        {"number": 2, "reason": CONTAMINATED, "eval_file": 0},
    ]


def test_a_common_eval_ngram_removes_nothing_and_a_contaminated_document_keeps_no_copy():
    # n-gram 4 is in two documents, more than max_matches allows: common text, not a leak.
    units = [fingerprints(0, [A, B], {0: [4], 1: [4, 6]}), fingerprints(1, [B], {})]
    entries = clean(units, max_matches=1, buckets=bucket_count(2))
    assert entries[0] == [{"number": 1, "reason": CONTAMINATED, "eval_file": 0}]
    # The contaminated document 1 of unit 0 takes no part in dedup, so unit 1's copy of it stays.
    assert entries[1] == []


def test_eval_match_counts_add_up_per_ngram():
    indices, counts = add_counts(
        [(np.array([1, 4]), np.array([2, 1])), (np.array([4, 9]), np.array([3, 1]))]
    )
    assert indices.tolist() == [1, 4, 9] and counts.tolist() == [2, 4, 1]
    assert common_ngrams((indices, counts), max_matches=1).tolist() == [1, 4]
    assert add_counts([])[0].tolist() == []
