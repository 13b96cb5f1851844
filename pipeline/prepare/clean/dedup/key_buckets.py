"""Deduplication's keys by bucket: what the cleaning stage's shuffle groups, and the duplicates one
bucket holds.

Fingerprints travel as arrays, one element per unit and key bucket, not one per document: a
shuffle's cost per element is paid a few times per unit, and a bucket holds about
`UNITS_PER_BUCKET` units' worth of keys, which bounds a worker's memory. Equal keys land in the same
bucket, so each bucket's duplicates are found apart from the others'.
"""

from __future__ import annotations

import collections
import math
from collections.abc import Collection, Iterable, Iterator

import numpy as np

from pipeline.prepare.clean.removals import EXACT, NEAR, duplicates, places
from pipeline.prepare.clean.unit_fingerprints import UnitFingerprints

UNITS_PER_BUCKET = 16

Keyed = tuple[
    tuple[str, int], tuple[np.ndarray, np.ndarray, np.ndarray]
]  # ((kind, bucket), (places, locations, keys))


def bucket_count(units: int) -> int:
    return max(1, math.ceil(units / UNITS_PER_BUCKET))


def _keyed_by_bucket(
    kind: str, places: np.ndarray, locations: np.ndarray, keys: np.ndarray, buckets: int
) -> Iterator[Keyed]:
    """`((kind, bucket), (places, locations, keys))` per bucket that gets keys; keys are rows of
    uint64s."""
    bucket_of = (keys[:, 0] % np.uint64(buckets)).astype(np.int64)
    order = np.argsort(bucket_of, kind="stable")
    bounds = np.flatnonzero(np.diff(bucket_of[order])) + 1
    for chunk in np.split(order, bounds) if len(order) else []:
        yield (kind, int(bucket_of[chunk[0]])), (places[chunk], locations[chunk], keys[chunk])


def unit_keys(
    unit: int, found: UnitFingerprints, removed: Collection[int], buckets: int
) -> Iterator[Keyed]:
    """The unit's exact and near keys by bucket, but those of the `removed` documents (contaminated
    ones take no part in deduplication, so a keeper is never a document removed anyway)."""
    for kind, numbers, keys in (
        (EXACT, found.exact_numbers, found.exact_keys),
        (NEAR, found.near_numbers, found.near_keys),
    ):
        kept = ~np.isin(numbers, list(removed))
        numbers, keys = numbers[kept], keys[kept]
        if not len(numbers):
            continue
        if kind == NEAR:  # one row per band: its key, the band's index being part of it already
            numbers, keys = np.repeat(numbers, keys.shape[1]), keys.reshape(-1, 1)
        yield from _keyed_by_bucket(
            kind, places(unit, numbers), found.locations[numbers], keys, buckets
        )


def bucket_duplicates(
    kind: str, parts: Iterable[tuple[np.ndarray, np.ndarray, np.ndarray]]
) -> dict[int, list[tuple]]:
    """Per unit, `(number, reason, keeper place, keeper location)` of its documents in one bucket
    whose key an earlier document has."""
    per_unit = collections.defaultdict(list)
    for unit, number, reason, keeper, location in duplicates(kind, parts):
        per_unit[unit].append((number, reason, keeper, location))
    return per_unit
