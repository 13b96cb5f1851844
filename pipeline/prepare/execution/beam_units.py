"""Work units as Beam elements, and a stage's pipeline run on the pinned local runner or submitted
to a remote one.

One element is one whole work unit, so per-element overhead is paid once per ~16 MB of input. A
stage's DoFns never raise: a failed unit is recorded (see `failures`), and a unit that starts after
a failure was recorded does nothing, so a failing run ends within seconds on every runner.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable
from typing import TypeVar

import apache_beam as beam
from apache_beam.options.pipeline_options import DirectOptions, PipelineOptions
from apache_beam.portability.api import beam_provision_api_pb2
from apache_beam.runners.portability.fn_api_runner import fn_runner
from apache_beam.runners.portability.portable_runner import JobServiceHandle
from apache_beam.runners.runner import PipelineResult, PipelineRunner
from apache_beam.transforms import environments

from pipeline.prepare.execution.failures import UnitFailure, any_failure, record_failure
from pipeline.prepare.execution.forked_workers import ForkedWorkers, forked_worker_count
from pipeline.prepare.execution.retries import is_transient, with_retries
from pipeline.prepare.read import SourceError
from pipeline.prepare.run_context import RunContext
from pipeline.prepare.units import InputChangedError, WorkUnit

T = TypeVar("T")

# Makes a stage's pipeline: its steps applied to the units.
Build = Callable[[beam.Pipeline, list[WorkUnit], RunContext], None]
# What a stage's workers need loaded (a tokenizer, spaCy): a local job loads it once, before it
# forks its workers, instead of every worker loading its own.
Preload = Callable[[RunContext], None]


def failure_of(unit: WorkUnit, error: BaseException) -> UnitFailure:
    """One line naming the input and the reason; expected kinds need no traceback to be
    understood."""
    if isinstance(error, (SourceError, InputChangedError)):
        message = str(error)
    elif is_transient(error):
        message = (
            f"{unit.path}: {error} (still failing after retries; rerun to try this unit again)"
        )
    elif isinstance(error, OSError):
        message = f"{unit.path} (unit {unit.index}): {error}"
    else:
        message = f"unit {unit.index} ({unit.path}) failed: {type(error).__name__}: {error}"
    return UnitFailure(unit.index, " ".join(message.split()), traceback.format_exc())


def guarded(
    unit: WorkUnit, failures_dir: str, work: Callable[[], T], emit: Callable[[T], list]
) -> list:
    """What a DoFn outputs for `unit`: `emit(work())`, the work tried again after transient errors.
    Nothing once the run is failing (the rest is left to a rerun), nor when the work fails: its
    failure is recorded instead of raised."""
    if any_failure(failures_dir):
        return []  # the run is failing: leave the rest to a rerun
    try:
        done = with_retries(work)
    except Exception as e:
        record_failure(failures_dir, failure_of(unit, e))
        return []
    return emit(done)


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


def _local_runner(
    options: PipelineOptions, environment: environments.Environment | None = None
) -> PipelineRunner:
    """Beam's in-process runner, with the options its worker processes are to see."""
    encoded = JobServiceHandle.encode_pipeline_options(options.get_all_options())
    provision = fn_runner.ExtendedProvisionInfo(
        beam_provision_api_pb2.ProvisionInfo(pipeline_options=encoded)
    )
    return fn_runner.FnApiRunner(default_environment=environment, provision_info=provision)


def run_units(
    units: list[WorkUnit],
    context: RunContext,
    options: PipelineOptions,
    build: Build,
    preload: Preload,
) -> None:
    """Runs the units, through the pipeline `build` makes, on the pinned local runner, returning
    when they are done.

    Call it in a single-threaded process: in `multi_processing` mode it forks the workers first,
    with what `preload` loads.
    """
    count = forked_worker_count(options)
    if not count:
        with beam.Pipeline(runner=_local_runner(options), options=options) as pipeline:
            build(pipeline, units, context)
        return
    preload(context)  # once, before the fork
    workers = ForkedWorkers(count)
    try:
        # A running mode the runner does not know keeps the given environment instead of its own.
        options.view_as(DirectOptions).direct_running_mode = None
        with beam.Pipeline(
            runner=_local_runner(options, workers.environment()), options=options
        ) as pipeline:
            build(pipeline, units, context)
    finally:
        workers.close()


def start_units(
    units: list[WorkUnit], context: RunContext, options: PipelineOptions, build: Build
) -> PipelineResult:
    """Submits the units, through the pipeline `build` makes, to the configured (remote) runner;
    returns as soon as it has them."""
    pipeline = beam.Pipeline(options=options)
    build(pipeline, units, context)
    return pipeline.run()
