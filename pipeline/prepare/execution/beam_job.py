"""The Beam side of `prepare`: options, the one DoFn, and the pipeline that runs the units.

One element is one whole work unit, so per-element overhead is paid once per ~16 MB of input. The
DoFn never raises: a failed unit is recorded (see `failures`), and a unit that starts after a
failure was recorded does nothing, so a failing run ends within seconds on every runner.
Locally the in-process Python runner is pinned: Beam's DirectRunner would first try to fetch and
start its Prism binary, and a machine with network access would then run another runner than the
one tested.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import os
import traceback
from collections.abc import Callable

import apache_beam as beam
from apache_beam.metrics import Metrics
from apache_beam.options.pipeline_options import (
    DirectOptions,
    PipelineOptions,
    StandardOptions,
    WorkerOptions,
)
from apache_beam.portability.api import beam_provision_api_pb2
from apache_beam.runners.portability.fn_api_runner import fn_runner
from apache_beam.runners.portability.portable_runner import JobServiceHandle
from apache_beam.runners.runner import PipelineResult, PipelineRunner
from apache_beam.transforms import environments

from pipeline.prepare.execution.failures import UnitFailure, any_failure, record_failure
from pipeline.prepare.execution.forked_workers import ForkedWorkers, forked_worker_count
from pipeline.prepare.execution.retries import is_transient, with_retries
from pipeline.prepare.read import SourceError
from pipeline.prepare.units import WorkUnit
from pipeline.prepare.run_context import RunContext
from pipeline.prepare.tokenize.unit import InputChangedError, process_unit
from pipeline.prepare.execution.worker_environment import package_versions, version_mismatch
from pipeline.tokenization import load_tokenizer

LOCAL_RUNNERS = (None, "DirectRunner", "direct", "FnApiRunner")


def _beam_option_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    stack = [PipelineOptions]
    while stack:
        cls = stack.pop()
        stack += cls.__subclasses__()
        if "_add_argparse_args" in vars(cls):
            cls._add_argparse_args(parser)
    return parser


def import_runner_module(pipeline_args: list[str]) -> None:
    """Imports the module of a runner named by its path (`--runner=package.module.Class`), so that
    its option classes (Dask's `--dask_client_address`) are known before the options are checked."""
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    parser.add_argument("--runner")
    runner = parser.parse_known_args(pipeline_args)[0].runner
    if runner and "." in runner:
        module = runner.rsplit(".", 1)[0]
        try:
            importlib.import_module(module)
        except ImportError as e:
            hint = " (pip install 'tokshards[dask]')" if "dask" in module else ""
            raise ValueError(f"--runner={runner}: cannot import {module}: {e}{hint}") from None


def check_beam_args(pipeline_args: list[str], own_flags: list[str]) -> None:
    """Refuses options Beam does not know either, naming the nearest one: a misspelt option of ours
    (`--validation_fraction`) would otherwise go to Beam and be silently ignored."""
    import_runner_module(pipeline_args)
    parser = _beam_option_parser()
    _, unknown = parser.parse_known_args(pipeline_args)
    flags = [a.split("=", 1)[0] for a in unknown if a.startswith("-")]
    if not flags:
        if unknown:
            raise ValueError(f"unexpected argument {unknown[0]!r}")
        return
    known = own_flags + [s for a in parser._actions for s in a.option_strings]
    near = difflib.get_close_matches(flags[0].replace("_", "-"), [k.replace("_", "-") for k in known], n=1)
    hint = ""
    if near:
        spelled = next(k for k in known if k.replace("_", "-") == near[0])
        hint = f"; did you mean {spelled}?"
    raise ValueError(f"unknown option {flags[0]}{hint}")


def is_local_runner(options: PipelineOptions) -> bool:
    return options.view_as(StandardOptions).runner in LOCAL_RUNNERS


def pipeline_options(pipeline_args: list[str]) -> PipelineOptions:
    """Locally: every core, in worker processes, workers that speak only of problems. On Dask: a
    partition per unit. Elsewhere: the user's options."""
    options = PipelineOptions(pipeline_args)
    runner = options.view_as(StandardOptions).runner or ""
    partitioned = any(a.startswith(("--dask_npartitions", "--dask_partition_size")) for a in pipeline_args)
    if runner.endswith("DaskRunner") and not partitioned:
        # One unit per partition: Dask hands partitions, not elements, to its workers.
        options = PipelineOptions([*pipeline_args, "--dask_partition_size=1"])
    if is_local_runner(options):
        direct = options.view_as(DirectOptions)
        if not any(a.startswith("--direct_num_workers") for a in pipeline_args):
            direct.direct_num_workers = os.cpu_count() or 1
        if not any(a.startswith("--direct_running_mode") for a in pipeline_args):
            direct.direct_running_mode = "multi_processing"
        workers = options.view_as(WorkerOptions)
        if workers.default_sdk_harness_log_level is None:
            workers.default_sdk_harness_log_level = "WARNING"
        if workers.sdk_harness_log_level_overrides is None:
            # Each worker logs where its log directory is and which of Beam's own boolean options it
            # cannot parse back (a Beam quirk): neither is news to anyone.
            workers.sdk_harness_log_level_overrides = {
                "__main__": "ERROR",
                "apache_beam.options.pipeline_options": "ERROR",
            }
    return options


def _local_runner(options: PipelineOptions, environment: environments.Environment | None = None) -> PipelineRunner:
    """Beam's in-process runner, with the options its worker processes are to see."""
    encoded = JobServiceHandle.encode_pipeline_options(options.get_all_options())
    provision = fn_runner.ExtendedProvisionInfo(beam_provision_api_pb2.ProvisionInfo(pipeline_options=encoded))
    return fn_runner.FnApiRunner(default_environment=environment, provision_info=provision)


def failure_of(unit: WorkUnit, error: BaseException) -> UnitFailure:
    """One line naming the input and the reason; expected kinds need no traceback to be understood."""
    if isinstance(error, (SourceError, InputChangedError)):
        message = str(error)
    elif is_transient(error):
        message = f"{unit.path}: {error} (still failing after retries; rerun to try this unit again)"
    elif isinstance(error, OSError):
        message = f"{unit.path} (unit {unit.index}): {error}"
    else:
        message = f"unit {unit.index} ({unit.path}) failed: {type(error).__name__}: {error}"
    return UnitFailure(unit.index, " ".join(message.split()), traceback.format_exc())


class PrepareUnitFn(beam.DoFn):
    def __init__(self, context: RunContext):
        self._context = context
        self._mismatch: str | None = None
        self._units = Metrics.counter("prepare", "units")
        self._tokens = Metrics.counter("prepare", "tokens")

    def setup(self) -> None:
        # Workers must tokenize and write with what the launcher planned with.
        mismatch = version_mismatch(self._context.package_versions, package_versions(self._context.extras))
        if mismatch is not None:
            self._mismatch = f"workers run other package versions than the launcher: {mismatch}"

    def process(self, unit: WorkUnit) -> list[int]:
        """The unit's index once its record is written; nothing when it failed or was skipped."""
        failures_dir = self._context.failures_dir
        if any_failure(failures_dir):
            return []  # the run is failing: leave the rest to a rerun
        if self._mismatch is not None:
            record_failure(failures_dir, UnitFailure(unit.index, self._mismatch, ""))
            return []
        try:
            result = with_retries(lambda: process_unit(unit, self._context))
        except Exception as e:
            record_failure(failures_dir, failure_of(unit, e))
            return []
        self._units.inc()
        self._tokens.inc(result.tokens)
        return [unit.index]


def longest_first(units: list[WorkUnit]) -> list[WorkUnit]:
    """Byte-range units by size, largest first, then row units in plan order."""
    return sorted(units, key=lambda u: (u.rows, -(u.end - u.start)))


def spread_units(pipeline: beam.Pipeline, units: list[WorkUnit]) -> beam.PCollection:
    """The units as elements, spread evenly over the workers."""
    # Each unit is keyed by its place in a longest-first order and grouped: Beam's local runner
    # deals the keys out to its workers in turn, so each gets an equal share (it does not balance
    # work dynamically); a distributed runner spreads the keys over its workers.
    return (
        pipeline
        | "Units" >> beam.Create(list(enumerate(longest_first(units))), reshuffle=False)
        | "Spread" >> beam.GroupByKey()
        | "Unkey" >> beam.FlatMap(lambda keyed: keyed[1])
    )


Build = Callable[[beam.Pipeline, list[WorkUnit], RunContext], None]


def _build(pipeline: beam.Pipeline, units: list[WorkUnit], context: RunContext) -> None:
    spread_units(pipeline, units) | "TokenizeAndWrite" >> beam.ParDo(PrepareUnitFn(context))


def run_units(units: list[WorkUnit], context: RunContext, options: PipelineOptions, build: Build | None = None) -> None:
    """Runs the units (through the pipeline `build` makes) on the pinned local runner, returning
    when they are done.

    Call it in a single-threaded process: in `multi_processing` mode it forks the workers first.
    """
    count = forked_worker_count(options)
    if not count:
        with beam.Pipeline(runner=_local_runner(options), options=options) as pipeline:
            (build or _build)(pipeline, units, context)
        return
    config = context.config
    load_tokenizer(config.tokenizer, bos_token=config.bos_token, eos_token=config.eos_token)  # once, before the fork
    workers = ForkedWorkers(count)
    try:
        # A running mode the runner does not know keeps the given environment instead of its own.
        options.view_as(DirectOptions).direct_running_mode = None
        with beam.Pipeline(runner=_local_runner(options, workers.environment()), options=options) as pipeline:
            (build or _build)(pipeline, units, context)
    finally:
        workers.close()


def start_units(
    units: list[WorkUnit], context: RunContext, options: PipelineOptions, build: Build | None = None
) -> PipelineResult:
    """Submits the units to the configured (remote) runner; returns as soon as it has them."""
    pipeline = beam.Pipeline(options=options)
    (build or _build)(pipeline, units, context)
    return pipeline.run()
