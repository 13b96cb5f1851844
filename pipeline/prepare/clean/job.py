"""The cleaning stage: a Beam job run before the tokenizing one when `--filter`, `--dedup` or
`--decontaminate` is asked for.

    units -> Fingerprint (per unit: quality filters, then fingerprints; kept in the state directory)
          -> CountEvalMatches (in how many documents each eval n-gram is) -> CommonNgrams
          -> KeyDocuments (per unit: the contaminated documents, and the others' keys by bucket)
          -> GroupKeyBuckets -> FindDuplicates -> GroupByUnit -> WriteRemovalLists -> MarkCleaned

Contamination is decided only once every document's eval n-grams are counted: an n-gram found in
more than `decontaminate_max_matches` documents is common text (a licence, a page footer), not a
leak, and removes nothing. Contaminated documents take no part in deduplication, so a keeper is
never a document removed anyway.

Fingerprints travel as arrays, one element per unit and key bucket, not one per document: a
shuffle's cost per element is paid a few times per unit, and a bucket holds about
`UNITS_PER_BUCKET` units' worth of keys, which bounds a worker's memory. The record that the stage
is complete is written last, once every unit's removal list is; until then the tokenizing job does
not start, and a rerun runs this job again, reading the fingerprints already written.
"""

from __future__ import annotations

import collections
import io
import math

import apache_beam as beam
import numpy as np
from apache_beam.metrics import Metrics

from pipeline.dataset import storage
from pipeline.prepare.execution.beam_units import failure_of, spread_units
from pipeline.prepare.clean.edits import write_edits
from pipeline.prepare.clean.eval_sets import eval_set
from pipeline.prepare.clean.removals import (
    EXACT,
    NEAR,
    cleaned_path,
    contaminated_entry,
    duplicate_entry,
    duplicates,
    filtered_entry,
    merge,
    places,
    write_removal_list,
)
from pipeline.prepare.clean.quality_filters import QualityFilters
from pipeline.prepare.clean.unit_fingerprints import UnitFingerprints, fingerprint_unit, fingerprints_path
from pipeline.prepare.execution.failures import any_failure, record_failure
from pipeline.prepare.execution.retries import with_retries
from pipeline.prepare.units import WorkUnit
from pipeline.prepare.run_context import RunContext
from pipeline.prepare.tokenize.unit import check_unchanged
from schemas import formats

UNITS_PER_BUCKET = 16
EVAL_MATCHES_NAME = "eval_matches.npz"
_UNITS, _MATCHES = "units", "matches"


def fingerprints_key(context: RunContext) -> str:
    """What a unit's fingerprints depend on: the plan (config, inputs, eval files' contents)."""
    return context.plan


def eval_matches_path(output_dir: str) -> str:
    return storage.join(output_dir, formats.STATE_DIR, EVAL_MATCHES_NAME)


def read_fingerprints(unit: int, context: RunContext) -> UnitFingerprints | None:
    """A unit's fingerprints as this run's cleaning stage wrote them; None where there are none."""
    path = fingerprints_path(context.output_dir, unit)
    if not storage.exists(path):
        return None
    with storage.open_raw(path) as f:
        return UnitFingerprints.from_bytes(f.read(), fingerprints_key(context))


def unit_fingerprints(unit: WorkUnit, context: RunContext, filters: QualityFilters | None = None) -> UnitFingerprints:
    """The unit's fingerprints, from an earlier run's file when there is one; `filters` are the
    run's quality filters (None when it has none)."""
    found = read_fingerprints(unit.index, context)
    if found is not None:
        return found
    check_unchanged(unit)
    config = context.config
    evals = (
        eval_set(tuple(config.decontaminate), config.decontaminate_ngram, config.separator, context.eval_digests)
        if config.decontaminate
        else None
    )
    fingerprints = fingerprint_unit(unit, config, evals, filters)
    if filters is not None:
        write_edits(context.output_dir, unit.index, fingerprints.edits)
    storage.write_bytes_atomic(fingerprints_path(context.output_dir, unit.index), fingerprints.to_bytes(fingerprints_key(context)))
    return fingerprints


class FingerprintUnitFn(beam.DoFn):
    def __init__(self, context: RunContext):
        self._context = context
        self._documents = Metrics.counter("clean", "documents")
        self._filtered = Metrics.counter("clean", "filtered_documents")
        self._filters: QualityFilters | None = None

    def setup(self) -> None:
        config = self._context.config
        if config.filters:
            self._filters = QualityFilters(config.filters, config.filter_params)

    def process(self, unit: WorkUnit) -> list:
        """The unit once its fingerprints are written, and the eval n-grams its documents hold;
        nothing once a unit failed."""
        failures_dir = self._context.failures_dir
        if any_failure(failures_dir):
            return []  # the run is failing: leave the rest to a rerun
        try:
            found = with_retries(lambda: unit_fingerprints(unit, self._context, self._filters))
        except Exception as e:
            record_failure(failures_dir, failure_of(unit, e))
            return []
        self._documents.inc(found.documents)
        self._filtered.inc(len(found.filtered))
        return [unit, beam.pvalue.TaggedOutput(_MATCHES, found.eval_counts())]


def _add_counts(parts: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """`(indices, counts)` parts summed per index."""
    indices = np.concatenate([i for i, _ in parts] or [np.zeros(0, dtype=np.int64)])
    counts = np.concatenate([c for _, c in parts] or [np.zeros(0, dtype=np.int64)])
    unique, inverse = np.unique(indices, return_inverse=True)
    return unique.astype(np.int64), np.bincount(inverse, weights=counts, minlength=len(unique)).astype(np.int64)


class EvalMatchCounts(beam.CombineFn):
    """In how many documents each eval n-gram is: `(indices, counts)`, summed over the units."""

    def create_accumulator(self) -> tuple[np.ndarray, np.ndarray]:
        return _add_counts([])

    def add_input(self, total, counts):
        return _add_counts([total, counts])

    def merge_accumulators(self, totals):
        return _add_counts(list(totals))

    def extract_output(self, total):
        return total


def common_ngrams(total: tuple[np.ndarray, np.ndarray], context: RunContext) -> np.ndarray:
    """The eval n-grams found in more documents than `decontaminate_max_matches` (sorted indices);
    every matched n-gram's count is kept for the run's report."""
    indices, counts = total
    if context.config.decontaminate and not any_failure(context.failures_dir):
        out = io.BytesIO()
        np.savez(out, indices=indices, counts=counts)
        storage.write_bytes_atomic(eval_matches_path(context.output_dir), out.getvalue())
    return indices[counts > context.config.decontaminate_max_matches]


def read_eval_matches(output_dir: str) -> tuple[np.ndarray, np.ndarray]:
    """What `common_ngrams` kept: each matched eval n-gram's index and its count of documents."""
    with storage.open_raw(eval_matches_path(output_dir)) as f, np.load(io.BytesIO(f.read())) as arrays:
        return arrays["indices"], arrays["counts"]


def contaminated(found: UnitFingerprints, common: np.ndarray) -> dict[int, int]:
    """Per contaminated document number, the first eval file holding one of its n-grams that is not
    common text."""
    out = {}
    for i, number in enumerate(found.eval_numbers.tolist()):
        hits, files = found.hits_of(i)
        leaks = ~np.isin(hits, common, assume_unique=True)
        if leaks.any():
            out[number] = int(files[leaks].min())
    return out


def _keyed_by_bucket(kind: str, places: np.ndarray, locations: np.ndarray, keys: np.ndarray, buckets: int):
    """`((kind, bucket), (places, locations, keys))` per bucket that gets keys; keys are rows of uint64s."""
    bucket_of = (keys[:, 0] % np.uint64(buckets)).astype(np.int64)
    order = np.argsort(bucket_of, kind="stable")
    bounds = np.flatnonzero(np.diff(bucket_of[order])) + 1
    for chunk in np.split(order, bounds) if len(order) else []:
        yield (kind, int(bucket_of[chunk[0]])), (places[chunk], locations[chunk], keys[chunk])


class KeyDocumentsFn(beam.DoFn):
    def __init__(self, context: RunContext, buckets: int):
        self._context = context
        self._buckets = buckets

    def process(self, unit: WorkUnit, common: np.ndarray) -> list:
        """The unit's entry for the join by unit (its contaminated documents), and the other
        documents' keys by bucket."""
        failures_dir = self._context.failures_dir
        if any_failure(failures_dir):
            return []  # the counts may miss a failed unit's documents
        try:
            found = with_retries(lambda: read_fingerprints(unit.index, self._context))
        except Exception as e:
            record_failure(failures_dir, failure_of(unit, e))
            return []
        return list(self._elements(unit, found, common))

    def _elements(self, unit: WorkUnit, found: UnitFingerprints, common: np.ndarray):
        removed = contaminated(found, common)
        yield beam.pvalue.TaggedOutput(_UNITS, (unit.index, ("unit", found.documents, removed)))
        for kind, numbers, keys in ((EXACT, found.exact_numbers, found.exact_keys), (NEAR, found.near_numbers, found.near_keys)):
            kept = ~np.isin(numbers, list(removed))
            numbers, keys = numbers[kept], keys[kept]
            if not len(numbers):
                continue
            if kind == NEAR:  # one row per band: its key, the band's index being part of it already
                numbers, keys = np.repeat(numbers, keys.shape[1]), keys.reshape(-1, 1)
            yield from _keyed_by_bucket(kind, places(unit.index, numbers), found.locations[numbers], keys, self._buckets)


def find_duplicates(keyed):
    """Per unit, the documents of one bucket that an earlier document's key matches."""
    (kind, _), parts = keyed
    per_unit = collections.defaultdict(list)
    for unit, number, reason, keeper, location in duplicates(kind, parts):
        per_unit[unit].append((number, reason, keeper, location))
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
        documents, removed, candidates = 0, {}, []
        for item in items:
            if item[0] == "unit":
                _, documents, removed = item
            else:
                candidates += item[1]
        entries = [duplicate_entry(n, *found) for n, found in merge(candidates).items()]
        entries += [contaminated_entry(n, file) for n, file in removed.items()]
        found = with_retries(lambda: read_fingerprints(unit, self._context))
        entries += [filtered_entry(n, reason) for n, reason, _ in found.filtered]
        write_removal_list(self._context.output_dir, unit, documents, entries, found.locations, found.ids)
        self._removed.inc(len(entries))
        return [unit]


def _mark_cleaned(count: int, context: RunContext, total: int) -> None:
    if count == total and not any_failure(context.failures_dir):
        storage.write_bytes_atomic(cleaned_path(context.output_dir), fingerprints_key(context).encode())


def build_cleaning(pipeline: beam.Pipeline, units: list[WorkUnit], context: RunContext) -> None:
    buckets = max(1, math.ceil(context.num_units / UNITS_PER_BUCKET))
    fingerprinted = spread_units(pipeline, units) | "Fingerprint" >> beam.ParDo(
        FingerprintUnitFn(context)
    ).with_outputs(_MATCHES, main="units")
    common = (
        fingerprinted[_MATCHES]
        | "CountEvalMatches" >> beam.CombineGlobally(EvalMatchCounts())
        | "CommonNgrams" >> beam.Map(common_ngrams, context)
    )
    keyed = fingerprinted.units | "KeyDocuments" >> beam.ParDo(
        KeyDocumentsFn(context, buckets), beam.pvalue.AsSingleton(common)
    ).with_outputs(_UNITS, main="keys")
    found = (
        keyed.keys
        | "GroupKeyBuckets" >> beam.GroupByKey()
        | "FindDuplicates" >> beam.FlatMap(find_duplicates)
    )
    (
        (keyed[_UNITS], found)
        | "Join" >> beam.Flatten()
        | "GroupByUnit" >> beam.GroupByKey()
        | "WriteRemovalLists" >> beam.ParDo(WriteRemovalListFn(context))
        | "CountUnits" >> beam.combiners.Count.Globally()
        | "MarkCleaned" >> beam.Map(_mark_cleaned, context, len(units))
    )


def is_cleaned(context: RunContext) -> bool:
    """Whether this run's cleaning stage is complete (for this plan: the output directory refuses
    any other)."""
    path = cleaned_path(context.output_dir)
    return storage.exists(path) and storage.read_text(path) == fingerprints_key(context)
