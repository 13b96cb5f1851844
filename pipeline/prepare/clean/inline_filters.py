"""The filters judged by the tokenizing stage itself, where a run filters but neither deduplicates
nor decontaminates: then no document's fate depends on another unit's, so nothing needs a global
step first, and the cleaning stage (a second job, its fixed costs, the fingerprints written and read
back) is not run at all.

Each worker builds the run's filters once (`preload_filters` before a local job forks them); each
unit is judged as the cleaning stage would judge it (`unit_fingerprints`, the filters alone), its
removal list written before its shards, and the documents kept, with the texts the filters leave
them, tokenized. A `--filter-dry-run` still runs the cleaning stage, whose lists a later run reads.
"""

from __future__ import annotations

import functools
import json

from pipeline.prepare.clean.judgments import Filters
from pipeline.prepare.clean.quality.quality_filters import preload, quality_filters
from pipeline.prepare.clean.removals import removal_entries, write_removal_list
from pipeline.prepare.clean.unit_fingerprints import fingerprint_unit
from pipeline.prepare.run_context import RunContext
from pipeline.prepare.units import WorkUnit
from schemas.prepare_config import FILTER_NAMES, PrepareConfig


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
    if set(config.filters) & set(FILTER_NAMES):
        preload(config.filter_impl)
    worker_filters(config)


def judge_unit(unit: WorkUnit, context: RunContext) -> tuple[frozenset[int], dict[int, str]]:
    """Judges a unit's documents and writes its removal list; returns the numbers of the documents
    removed and the texts the filters changed, by number."""
    config = context.config
    found = fingerprint_unit(unit, config, None, worker_filters(config))
    entries = removal_entries([], {}, found.filtered)
    write_removal_list(
        context.output_dir,
        unit.index,
        found.documents,
        entries,
        found.locations,
        found.ids,
        found.languages,
        found.pii,
    )
    return frozenset(entry["number"] for entry in entries), dict(found.edits)
