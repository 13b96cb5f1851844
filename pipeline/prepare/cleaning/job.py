"""The cleaning stage: a Beam job run before the tokenizing one when `--dedup` or `--decontaminate`
is asked for.

    units -> Fingerprint (per unit, kept in the state directory) -> GroupByKey on key buckets
          -> FindDuplicates -> GroupByKey on units -> WriteRemovalLists -> Count -> MarkCleaned

Fingerprints travel as arrays, one element per unit and key bucket, not one per document: a
shuffle's cost per element is paid a few times per unit, and a bucket holds about
`UNITS_PER_BUCKET` units' worth of keys, which bounds a worker's memory. The record that the stage
is complete is written last, once every unit's removal list is; until then the tokenizing job does
not start, and a rerun runs this job again, reading the fingerprints already written.
"""

from __future__ import annotations

import collections
import json
import math

import apache_beam as beam
import numpy as np
from apache_beam.metrics import Metrics

from pipeline import storage
from pipeline.prepare import beam_job
from pipeline.prepare.cleaning.removals import (
    EXACT,
    NEAR,
    cleaned_path,
    duplicates,
    merge,
    place,
    write_removal_list,
)
from pipeline.prepare.cleaning.unit_fingerprints import UnitFingerprints, fingerprint_unit, fingerprints_path
from pipeline.prepare.failures import any_failure, record_failure
from pipeline.prepare.retries import with_retries
from pipeline.prepare.units import WorkUnit
from pipeline.prepare.worker import RunContext, check_unchanged

UNITS_PER_BUCKET = 16
_UNITS = "units"


def fingerprints_key(context: RunContext) -> str:
    """What a unit's fingerprints depend on beyond the plan (which guards the whole directory)."""
    return json.dumps({"plan": context.plan, "eval": list(context.eval_digests)})


def unit_fingerprints(unit: WorkUnit, context: RunContext) -> UnitFingerprints:
    """The unit's fingerprints, from an earlier run's file when there is one."""
    path, key = fingerprints_path(context.output_dir, unit.index), fingerprints_key(context)
    if storage.exists(path):
        with storage.open_raw(path) as f:
            found = UnitFingerprints.from_bytes(f.read(), key)
        if found is not None:
            return found
    check_unchanged(unit)
    fingerprints = fingerprint_unit(unit, context.config, context.eval_digests)
    storage.write_bytes_atomic(path, fingerprints.to_bytes(key))
    return fingerprints


def _keyed_by_bucket(kind: str, places: np.ndarray, keys: np.ndarray, buckets: int):
    """`((kind, bucket), (places, keys))` per bucket that gets keys; keys are rows of uint64s."""
    bucket_of = (keys[:, 0] % np.uint64(buckets)).astype(np.int64)
    order = np.argsort(bucket_of, kind="stable")
    bounds = np.flatnonzero(np.diff(bucket_of[order])) + 1
    for chunk in np.split(order, bounds) if len(order) else []:
        yield (kind, int(bucket_of[chunk[0]])), (places[chunk], keys[chunk])


class FingerprintUnitFn(beam.DoFn):
    def __init__(self, context: RunContext, buckets: int):
        self._context = context
        self._buckets = buckets
        self._documents = Metrics.counter("clean", "documents")

    def process(self, unit: WorkUnit) -> list:
        """The unit's keys by bucket, and its entry for the join by unit; nothing once a unit failed."""
        failures_dir = self._context.failures_dir
        if any_failure(failures_dir):
            return []  # the run is failing: leave the rest to a rerun
        try:
            found = with_retries(lambda: unit_fingerprints(unit, self._context))
        except Exception as e:
            record_failure(failures_dir, beam_job.failure_of(unit, e))
            return []
        return list(self._elements(unit, found))

    def _elements(self, unit: WorkUnit, found: UnitFingerprints):
        self._documents.inc(found.documents)
        contaminated = dict(zip(found.contaminated_numbers.tolist(), found.contaminated_files.tolist()))
        yield beam.pvalue.TaggedOutput(_UNITS, (unit.index, ("unit", found.documents, contaminated)))
        exact_places = np.array([place(unit.index, n) for n in found.exact_numbers.tolist()], dtype=np.int64)
        yield from _keyed_by_bucket(EXACT, exact_places, found.exact_keys, self._buckets)
        if len(found.near_numbers):
            # One row per band: its key, the band's index being part of it already.
            near_places = np.repeat([place(unit.index, n) for n in found.near_numbers.tolist()], found.near_keys.shape[1])
            yield from _keyed_by_bucket(NEAR, near_places.astype(np.int64), found.near_keys.reshape(-1, 1), self._buckets)


def find_duplicates(keyed):
    """Per unit, the documents of one bucket that an earlier document's key matches."""
    (kind, _), parts = keyed
    per_unit = collections.defaultdict(list)
    for unit, number, reason, keeper in duplicates(kind, parts):
        per_unit[unit].append((number, reason, keeper))
    for unit, found in per_unit.items():
        yield unit, ("duplicates", found)


class WriteRemovalListFn(beam.DoFn):
    def __init__(self, context: RunContext):
        self._context = context
        self._removed = Metrics.counter("clean", "removed_documents")

    def process(self, keyed) -> list[int]:
        unit, items = keyed
        if any_failure(self._context.failures_dir):
            return []  # the lists would miss a failed unit's documents
        documents, contaminated, candidates = 0, {}, []
        for item in items:
            if item[0] == "unit":
                _, documents, contaminated = item
            else:
                candidates += item[1]
        found = merge(candidates)
        write_removal_list(self._context.output_dir, unit, documents, found, contaminated)
        self._removed.inc(len(found) + len(contaminated))
        return [unit]


def _mark_cleaned(count: int, context: RunContext, total: int) -> None:
    if count == total and not any_failure(context.failures_dir):
        storage.write_bytes_atomic(cleaned_path(context.output_dir), fingerprints_key(context).encode())


def build_cleaning(pipeline: beam.Pipeline, units: list[WorkUnit], context: RunContext) -> None:
    buckets = max(1, math.ceil(context.num_units / UNITS_PER_BUCKET))
    fingerprints = beam_job.spread_units(pipeline, units) | "Fingerprint" >> beam.ParDo(
        FingerprintUnitFn(context, buckets)
    ).with_outputs(_UNITS, main="keys")
    found = (
        fingerprints.keys
        | "GroupKeyBuckets" >> beam.GroupByKey()
        | "FindDuplicates" >> beam.FlatMap(find_duplicates)
    )
    (
        (fingerprints[_UNITS], found)
        | "Join" >> beam.Flatten()
        | "GroupByUnit" >> beam.GroupByKey()
        | "WriteRemovalLists" >> beam.ParDo(WriteRemovalListFn(context))
        | "CountUnits" >> beam.combiners.Count.Globally()
        | "MarkCleaned" >> beam.Map(_mark_cleaned, context, len(units))
    )


def is_cleaned(context: RunContext) -> bool:
    """Whether this run's cleaning stage is complete. Raises ValueError when an earlier run here
    completed it against other eval files: units it tokenized followed that stage's lists."""
    path = cleaned_path(context.output_dir)
    if not storage.exists(path):
        return False
    if storage.read_text(path) != fingerprints_key(context):
        raise ValueError(
            f"the eval files changed since this unfinished run in {context.output_dir} decontaminated against "
            "them; pass --overwrite to prepare again"
        )
    return True
