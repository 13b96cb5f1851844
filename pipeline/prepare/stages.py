"""One place that runs a stage of prepare, wherever it runs, and tells its failure in one line.

A run has two stages, each a Beam pipeline over work units: cleaning (`--filter`, `--dedup`,
`--decontaminate`), then tokenizing. Either runs on the local runner, in a child process watched
until its units are recorded, or on a remote runner, watched the same way (`execution.watch`), and
stops on the first recorded unit failure. A failure, the job's own or a unit's, becomes the user's
line: a `PrepareError` saying what failed and that the work done is kept for a rerun, with the
traceback under --verbose.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
import tempfile
import time
from collections.abc import Callable, Iterator

from apache_beam.options.pipeline_options import PipelineOptions

from pipeline.dataset import storage
from pipeline.prepare.clean.inline_filters import judges_while_tokenizing
from pipeline.prepare.clean.removals import cleans, is_cleaned
from pipeline.prepare.clean.unit_fingerprints import fingerprinted_units
from pipeline.prepare.execution import early_job, watch
from pipeline.prepare.execution.beam_cleaning import build_cleaning, preload_cleaning
from pipeline.prepare.execution.beam_options import is_local_runner, pipeline_options, runner_name
from pipeline.prepare.execution.beam_tokenizing import build_tokenizing, preload_tokenizing
from pipeline.prepare.execution.beam_units import Build, Preload
from pipeline.prepare.execution.failures import read_failures, remote_failures_dir
from pipeline.prepare.execution.progress import BYTES, Progress
from pipeline.prepare.execution.worker_environment import package_versions, staging_options
from pipeline.prepare.planning import Plan, worker_extras
from pipeline.prepare.run_context import RunContext
from pipeline.prepare.units import UnitResult, WorkUnit, input_bytes
from pipeline.prepare.write.finalize import finished_unit_indices, finished_units
from schemas.errors import RunError
from schemas.prepare_config import PrepareConfig, near_threshold


class PrepareError(RunError, RuntimeError):
    """An expected failure of a run, reported as one line; `details` (a traceback) with
    --verbose."""


@dataclasses.dataclass(frozen=True)
class Stage:
    build: Build  # makes the stage's pipeline
    preload: Preload  # what its workers need, loaded once before a local job forks them
    kept: str  # what a failed run keeps, for a rerun to resume from
    counts_failures: bool  # whether the line counts the failed units after the first


CLEANING = Stage(build_cleaning, preload_cleaning, kept="fingerprints done", counts_failures=False)
TOKENIZING = Stage(build_tokenizing, preload_tokenizing, kept="units done", counts_failures=True)


@dataclasses.dataclass(frozen=True)
class StageRunner:
    """Runs a run's stages where its options say."""

    plan: Plan
    context: RunContext
    options: PipelineOptions
    verbose: bool

    @property
    def local(self) -> bool:
        return is_local_runner(self.options)

    @property
    def runner(self) -> str:
        return runner_name(self.options)

    def run(
        self,
        stage: Stage,
        units: list[WorkUnit],
        finished: Callable[[], set[int]],
        progress: Progress | None = None,
    ) -> int:
        """Runs the stage's units until `finished` lists them all, reporting `progress` if given;
        returns the restarts made after lost workers. The job's failure, or the first unit failure
        recorded, is raised as a PrepareError."""
        tick = progress.tick if progress is not None else lambda: None
        try:
            if self.local:
                restarts = watch.run_local(
                    units, self.context, self.options, finished, tick, stage.build, stage.preload
                )
            else:
                watch.run_remote(units, self.context, self.options, finished, tick, stage.build)
                restarts = 0
        except watch.JobError as e:
            raise self._failed(stage, str(e), e.details) from None
        if progress is not None:
            progress.finish()
        failures = read_failures(self.context.failures_dir)
        if failures:
            more = (
                f" (and {len(failures) - 1} more failed units)"
                if stage.counts_failures and len(failures) > 1
                else ""
            )
            raise self._failed(stage, failures[0].message + more, failures[0].traceback)
        return restarts

    def _failed(self, stage: Stage, message: str, details: str) -> PrepareError:
        return PrepareError(
            f"{message}; the {stage.kept} are kept, and a rerun resumes",
            details if self.verbose else "",
        )

    @property
    def _interval(self) -> float:
        """Seconds between polls of a stage's durable output: a listing is cheap locally only."""
        return 1.0 if storage.is_local(self.context.output_dir) else 10.0

    def clean(self, dry_run: bool = False) -> float:
        """Runs the cleaning stage unless it is not asked for, already complete, or left to the
        tokenizing stage (filters alone, but for a dry run or one begun); returns its seconds. It
        fingerprints every unit (reading back what an interrupted run wrote), since duplicates are
        found across all of them."""
        config = self.context.config
        if not cleans(config) or is_cleaned(self.context):
            return 0.0
        # An earlier dry run's stage, stopped part-way, is finished rather than judged again.
        started_before = fingerprinted_units(self.context.output_dir)
        if judges_while_tokenizing(config) and not dry_run and not started_before:
            return 0.0
        started = time.time()
        units = list(self.plan.units)
        output_dir = self.context.output_dir
        sizes = input_bytes(units)
        done = fingerprinted_units(output_dir)
        print(
            f"prepare: cleaning {len(units)} units ({len(done)} already done; "
            f"{_cleaning_rules(config)})",
            file=sys.stderr,
        )
        everything = {u.index for u in units}

        def cleaned() -> set[int]:
            return everything if is_cleaned(self.context) else set()

        def poll() -> tuple[int, int]:
            found = fingerprinted_units(output_dir)
            return len(found), sum(sizes.get(i, 0) for i in found)

        progress = Progress(
            poll,
            len(units),
            already_done=len(done),
            already_amount=sum(sizes.get(i, 0) for i in done),
            unit=BYTES,
            interval=self._interval,
        )
        self.run(CLEANING, units, cleaned, progress)
        return time.time() - started

    def tokenize(self, pending: list[WorkUnit], done: dict[int, UnitResult]) -> int:
        """Runs the `pending` units, with progress lines counting the `done` ones too; returns the
        restarts made."""
        if not pending:
            return 0
        output_dir = self.context.output_dir
        seen: dict[int, UnitResult] = {}

        def poll() -> tuple[int, int]:
            seen.update(finished_units(output_dir, seen))
            return len(seen), sum(r.tokens for r in seen.values())

        progress = Progress(
            poll,
            self.context.num_units,
            already_done=len(done),
            already_amount=sum(r.tokens for r in done.values()),
            interval=self._interval,
        )
        return self.run(TOKENIZING, pending, lambda: finished_unit_indices(output_dir), progress)


@contextlib.contextmanager
def stage_runner(
    plan: Plan, output_dir: str, pipeline_args: list[str], verbose: bool
) -> Iterator[StageRunner]:
    """The runner of the plan's stages, with the options that go to Beam and a scratch directory
    (the workers' staged requirements, a local run's failures) that lasts while they run."""
    extras = worker_extras(plan)
    with tempfile.TemporaryDirectory(prefix="prepare-") as scratch:
        try:
            staging = staging_options(pipeline_args, scratch, extras)
        except (ValueError, RuntimeError) as e:
            raise PrepareError(str(e)) from None
        options = pipeline_options(pipeline_args + staging)
        local = is_local_runner(options)
        context = RunContext(
            config=plan.config,
            dtype_name=plan.dtype,
            num_units=len(plan.units),
            output_dir=output_dir,
            plan=plan.fingerprint(),
            package_versions=package_versions(extras),
            extras=extras,
            failures_dir=scratch if local else remote_failures_dir(output_dir),
            eval_digests=plan.eval_digests,
        )
        if not local:
            early_job.stop()  # the job runs on the runner's workers
            storage.delete_tree(context.failures_dir)  # an earlier run's, on a remote runner
        yield StageRunner(plan, context, options, verbose)


def _cleaning_rules(config: PrepareConfig) -> str:
    rules = [f"filters {','.join(config.filters)}"] if config.filters else []
    rules.append(f"dedup {config.dedup}")
    if config.dedup == "near":
        rules[-1] += (
            f": word {config.near_ngram}-grams, {config.near_bands} bands x {config.near_rows} "
            f"rows, threshold about {near_threshold(config.near_bands, config.near_rows):.2f}"
        )
    if config.decontaminate:
        rules.append(
            f"{len(config.decontaminate)} eval files, {config.decontaminate_ngram}-grams in at "
            f"most {config.decontaminate_max_matches} documents"
        )
    return "; ".join(rules)
