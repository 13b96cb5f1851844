"""The filters judged by the tokenizing stage itself, where a run filters but neither deduplicates
nor decontaminates: then no document's fate depends on another unit's, so nothing needs a global
step first, and the cleaning stage (a second job, its fixed costs, the fingerprints written and read
back) is not run at all.

Each worker builds the run's filters once (`preload_filters` before a local job forks them). A unit
is read once: its documents are judged as the cleaning stage would judge them (`unit_fingerprints`'
collector, the filters alone), a megabyte or so at a time, and those kept, with the texts the
filters leave them, go on to be tokenized, while those judged next wait; the unit's removal list is
written once it is read, before its shards are closed. A `--filter-dry-run` still runs the cleaning
stage, whose lists a later run reads.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator

from pipeline.prepare.clean.edits import to_tokenize
from pipeline.prepare.clean.judgments import Filters
from pipeline.prepare.clean.quality.quality_filters import preload, quality_filters
from pipeline.prepare.clean.removals import removal_entries, write_removal_list
from pipeline.prepare.clean.unit_fingerprints import (
    JUDGED_CHARACTERS,
    Collector,
    UnitFingerprints,
)
from pipeline.prepare.read import SourceError
from pipeline.prepare.read.base import ContentDigest
from pipeline.prepare.read.documents import DocumentPiece, Read, Tally
from pipeline.prepare.read.unit_documents import numbered_documents
from pipeline.prepare.run_context import RunContext
from pipeline.prepare.units import WorkUnit
from schemas.prepare_config import PrepareConfig, splits_words


def judges_while_tokenizing(config: PrepareConfig) -> bool:
    return bool(config.filters) and config.dedup == "none" and not config.decontaminate


@functools.cache
def _filters(names: tuple[str, ...], params: str, impl: str, language_model: str | None) -> Filters:
    return quality_filters(list(names), json.loads(params), impl, language_model)


def worker_filters(config: PrepareConfig) -> Filters:
    """The run's filters, built once per process."""
    params = json.dumps(config.filter_params, sort_keys=True)
    return _filters(tuple(config.filters), params, config.filter_impl, config.language_model)


def preload_filters(config: PrepareConfig) -> None:
    """What the filters judge with, loaded once: the fastText models, and spaCy's words (most of a
    second to import) where a quality filter splits words."""
    if splits_words(config.filters):
        preload(config.filter_impl)
    worker_filters(config)


def judged_documents(
    unit: WorkUnit, context: RunContext, tally: Tally, digest: ContentDigest
) -> Iterator[tuple[Read, list[str | None]]]:
    """What the unit reads (see `numbered_documents`), without the documents the filters remove and
    with the texts they leave, judged as it is read, each read with its documents' languages (see
    `with_languages`); writes the unit's removal list once it is read whole. A bad unit skipped
    (`skip_bad_files`) leaves an empty list, as in the cleaning stage."""
    config = context.config
    collector = Collector(config, None, worker_filters(config))
    language_of: dict[int, str] = {}
    waiting: list[tuple[int, Read]] = []  # read, not yet judged
    characters = 0
    try:
        for first, read in numbered_documents(unit, config, tally, digest, located=True):
            collector.add(first, read)
            if collector.cut_too_long():  # removed: its pieces need not wait
                waiting = [(n, r) for n, r in waiting if n != first]
                continue
            waiting.append((first, read))
            characters += (
                len(read.text) if isinstance(read, DocumentPiece) else sum(map(len, read.texts))
            )
            if characters >= JUDGED_CHARACTERS and not collector.cutting:
                collector.judge_waiting()
                yield from _kept(waiting, collector, language_of, config.max_document_bytes)
                waiting, characters = [], 0
        collector.end_cut()
        found = collector.fingerprints(unit.index)  # the documents still waiting judged
        yield from _kept(waiting, collector, language_of, config.max_document_bytes)
    except SourceError:
        if config.skip_bad_files:
            found = Collector(config, None, worker_filters(config)).fingerprints(unit.index)
            _write_removals(unit, context, found)
        raise
    _write_removals(unit, context, found)


def _kept(
    waiting: list[tuple[int, Read]], collector: Collector, language_of: dict[int, str], limit: int
) -> Iterator[tuple[Read, list[str | None]]]:
    """The judged reads `waiting`, as the filters leave them, with their languages (`language_of`
    takes the collector's new ones)."""
    removed = frozenset(number for number, _, _ in collector.filtered)
    language_of.update((number, language) for number, language, *_ in collector.languages)
    return to_tokenize(waiting, dict(collector.edits), removed, language_of, limit)


def _write_removals(unit: WorkUnit, context: RunContext, found: UnitFingerprints) -> None:
    write_removal_list(
        context.output_dir,
        unit.index,
        found.documents,
        removal_entries([], {}, found.filtered),
        found.locations,
        found.ids,
        found.languages,
        found.pii,
    )
