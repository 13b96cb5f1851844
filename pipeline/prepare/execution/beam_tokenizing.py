"""The tokenizing stage as a Beam pipeline: the units spread over the workers, each read, tokenized
and written by the tokenize step (`tokenize.unit`) in one DoFn."""

from __future__ import annotations

import functools

import apache_beam as beam
from apache_beam.metrics import Metrics

from pipeline.prepare.clean.inline_filters import judges_while_tokenizing, preload_filters
from pipeline.prepare.execution.beam_units import guarded, spread_units
from pipeline.prepare.execution.failures import UnitFailure, any_failure, record_failure
from pipeline.prepare.execution.worker_environment import package_versions, version_mismatch
from pipeline.prepare.run_context import RunContext
from pipeline.prepare.tokenize.unit import process_unit
from pipeline.prepare.units import UnitResult, WorkUnit
from pipeline.tokenization import load_tokenizer


class TokenizeUnitFn(beam.DoFn):
    def __init__(self, context: RunContext):
        self._context = context
        self._mismatch: str | None = None
        self._units = Metrics.counter("prepare", "units")
        self._tokens = Metrics.counter("prepare", "tokens")

    def setup(self) -> None:
        # Workers must tokenize and write with what the launcher planned with.
        mismatch = version_mismatch(
            self._context.package_versions, package_versions(self._context.extras)
        )
        if mismatch is not None:
            self._mismatch = f"workers run other package versions than the launcher: {mismatch}"

    def process(self, unit: WorkUnit) -> list[int]:
        """The unit's index once its record is written; nothing when it failed or was skipped."""
        failures_dir = self._context.failures_dir
        if self._mismatch is not None:
            if not any_failure(failures_dir):
                record_failure(failures_dir, UnitFailure(unit.index, self._mismatch, ""))
            return []
        return guarded(
            unit, failures_dir, functools.partial(process_unit, unit, self._context), self._counted
        )

    def _counted(self, result: UnitResult) -> list[int]:
        self._units.inc()
        self._tokens.inc(result.tokens)
        return [result.unit]


def preload_tokenizing(context: RunContext) -> None:
    """The tokenizer, which every worker of the stage loads, and the filters where the stage judges
    documents itself."""
    config = context.config
    load_tokenizer(config.tokenizer, bos_token=config.bos_token, eos_token=config.eos_token)
    if judges_while_tokenizing(config):
        preload_filters(config)


def build_tokenizing(pipeline: beam.Pipeline, units: list[WorkUnit], context: RunContext) -> None:
    spread_units(pipeline, units) | "TokenizeAndWrite" >> beam.ParDo(TokenizeUnitFn(context))
