"""The cleaning stage as a Beam pipeline, run before the tokenizing one when `--filter`, `--dedup`
or `--decontaminate` is asked for. What each step does is the clean step's (`clean/`); here they are
strung together:

    units -> Fingerprint (per unit: quality filters, then fingerprints; kept in the state directory)
          -> CountEvalMatches (in how many documents each eval n-gram is) -> CommonNgrams
          -> KeyDocuments (per unit: the contaminated documents, and the others' keys by bucket)
          -> GroupKeyBuckets -> FindDuplicates -> GroupByUnit -> WriteRemovalLists -> MarkCleaned

The removal lists join, by unit, each unit's entry (its documents and its contaminated ones) with
the duplicates every bucket found of it. The record that the stage is complete is written last,
once every unit's removal list is; until then the tokenizing job does not start, and a rerun runs
this job again, reading the fingerprints already written.
"""

from __future__ import annotations

import functools

import apache_beam as beam
import numpy as np
from apache_beam.metrics import Metrics

from pipeline.prepare.clean.decontamination.eval_matches import (
    add_counts,
    common_ngrams,
    contaminated,
    write_eval_matches,
)
from pipeline.prepare.clean.dedup.key_buckets import bucket_count, bucket_duplicates, unit_keys
from pipeline.prepare.clean.judgments import Filters
from pipeline.prepare.clean.quality.quality_filters import preload, quality_filters
from pipeline.prepare.clean.removals import mark_cleaned, removal_entries, write_removal_list
from pipeline.prepare.clean.unit_fingerprints import (
    UnitFingerprints,
    read_fingerprints,
    unit_fingerprints,
)
from pipeline.prepare.execution.beam_units import guarded, spread_units
from pipeline.prepare.execution.failures import any_failure
from pipeline.prepare.execution.retries import with_retries
from pipeline.prepare.run_context import RunContext
from pipeline.prepare.units import WorkUnit

_UNITS, _MATCHES = "units", "matches"


class FingerprintUnitFn(beam.DoFn):
    def __init__(self, context: RunContext):
        self._context = context
        self._documents = Metrics.counter("clean", "documents")
        self._filtered = Metrics.counter("clean", "filtered_documents")
        self._filters: Filters | None = None

    def setup(self) -> None:
        config = self._context.config
        if config.filters:
            self._filters = quality_filters(
                config.filters, config.filter_params, config.filter_impl, config.language_model
            )

    def process(self, unit: WorkUnit) -> list:
        """The unit once its fingerprints are written, and the eval n-grams its documents hold;
        nothing once a unit failed."""
        work = functools.partial(unit_fingerprints, unit, self._context, self._filters)
        return guarded(
            unit, self._context.failures_dir, work, lambda found: self._outputs(unit, found)
        )

    def _outputs(self, unit: WorkUnit, found: UnitFingerprints) -> list:
        self._documents.inc(found.documents)
        self._filtered.inc(len(found.filtered))
        return [unit, beam.pvalue.TaggedOutput(_MATCHES, found.eval_counts())]


class EvalMatchCounts(beam.CombineFn):
    """In how many documents each eval n-gram is: `(indices, counts)`, summed over the units."""

    def create_accumulator(self) -> tuple[np.ndarray, np.ndarray]:
        return add_counts([])

    def add_input(self, total, counts):
        return add_counts([total, counts])

    def merge_accumulators(self, totals):
        return add_counts(list(totals))

    def extract_output(self, total):
        return total


def _common_ngrams(total: tuple[np.ndarray, np.ndarray], context: RunContext) -> np.ndarray:
    """The common eval n-grams; every matched n-gram's count is kept for the run's report."""
    if context.config.decontaminate and not any_failure(context.failures_dir):
        write_eval_matches(context.output_dir, total)
    return common_ngrams(total, context.config.decontaminate_max_matches)


class KeyDocumentsFn(beam.DoFn):
    def __init__(self, context: RunContext, buckets: int):
        self._context = context
        self._buckets = buckets

    def process(self, unit: WorkUnit, common: np.ndarray) -> list:
        """The unit's entry for the join by unit (its contaminated documents), and the other
        documents' keys by bucket."""
        # Once a unit failed, the counts may miss its documents: `guarded` does nothing then.
        work = functools.partial(read_fingerprints, unit.index, self._context)
        return guarded(
            unit,
            self._context.failures_dir,
            work,
            lambda found: list(self._elements(unit, found, common)),
        )

    def _elements(self, unit: WorkUnit, found: UnitFingerprints, common: np.ndarray):
        removed = contaminated(found, common)
        yield beam.pvalue.TaggedOutput(_UNITS, (unit.index, ("unit", found.documents, removed)))
        yield from unit_keys(unit.index, found, removed, self._buckets)


def _find_duplicates(keyed):
    """Per unit, the documents of one bucket that an earlier document's key matches."""
    (kind, _), parts = keyed
    for unit, found in bucket_duplicates(kind, parts).items():
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
        found = with_retries(lambda: read_fingerprints(unit, self._context))
        entries = removal_entries(candidates, removed, found.filtered)
        write_removal_list(
            self._context.output_dir,
            unit,
            documents,
            entries,
            found.locations,
            found.ids,
            found.languages,
            found.pii,
        )
        self._removed.inc(len(entries))
        return [unit]


def _mark_cleaned(count: int, context: RunContext, total: int) -> None:
    if count == total and not any_failure(context.failures_dir):
        mark_cleaned(context)


def preload_cleaning(context: RunContext) -> None:
    """What the quality filters judge with (spaCy's English pipeline, most of a second to import),
    where the run has filters."""
    if context.config.filters:
        preload(context.config.filter_impl)


def build_cleaning(pipeline: beam.Pipeline, units: list[WorkUnit], context: RunContext) -> None:
    buckets = bucket_count(context.num_units)
    fingerprinted = spread_units(pipeline, units) | "Fingerprint" >> beam.ParDo(
        FingerprintUnitFn(context)
    ).with_outputs(_MATCHES, main="units")
    common = (
        fingerprinted[_MATCHES]
        | "CountEvalMatches" >> beam.CombineGlobally(EvalMatchCounts())
        | "CommonNgrams" >> beam.Map(_common_ngrams, context)
    )
    keyed = fingerprinted.units | "KeyDocuments" >> beam.ParDo(
        KeyDocumentsFn(context, buckets), beam.pvalue.AsSingleton(common)
    ).with_outputs(_UNITS, main="keys")
    found = (
        keyed.keys
        | "GroupKeyBuckets" >> beam.GroupByKey()
        | "FindDuplicates" >> beam.FlatMap(_find_duplicates)
    )
    (
        (keyed[_UNITS], found)
        | "Join" >> beam.Flatten()
        | "GroupByUnit" >> beam.GroupByKey()
        | "WriteRemovalLists" >> beam.ParDo(WriteRemovalListFn(context))
        | "CountUnits" >> beam.combiners.Count.Globally()
        | "MarkCleaned" >> beam.Map(_mark_cleaned, context, len(units))
    )
