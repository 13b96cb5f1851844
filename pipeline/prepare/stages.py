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
from pipeline.prepare.clean.removals import cleans, is_cleaned
from pipeline.prepare.execution import watch
from pipeline.prepare.execution.beam_cleaning import build_cleaning
from pipeline.prepare.execution.beam_options import is_local_runner, pipeline_options, runner_name
from pipeline.prepare.execution.beam_tokenizing import build_tokenizing
from pipeline.prepare.execution.beam_units import Build
from pipeline.prepare.execution.failures import read_failures, remote_failures_dir
from pipeline.prepare.execution.progress import Progress
from pipeline.prepare.execution.worker_environment import package_versions, staging_options
from pipeline.prepare.planning import Plan, worker_extras
from pipeline.prepare.run_context import RunContext
from pipeline.prepare.units import UnitResult, WorkUnit
from pipeline.prepare.write.finalize import finished_unit_indices, finished_units
from schemas.errors import RunError
from schemas.prepare_config import PrepareConfig, near_threshold


class PrepareError(RunError, RuntimeError):
    """An expected failure of a run, reported as one line; `details` (a traceback) with
    --verbose."""


@dataclasses.dataclass(frozen=True)
class Stage:
    build: Build  # makes the stage's pipeline
    kept: str  # what a failed run keeps, for a rerun to resume from
    counts_failures: bool  # whether the line counts the failed units after the first


CLEANING = Stage(build_cleaning, kept="fingerprints done", counts_failures=False)
TOKENIZING = Stage(build_tokenizing, kept="units done", counts_failures=True)


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
                    units, self.context, self.options, finished, tick, stage.build
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

    def clean(self) -> float:
        """Runs the cleaning stage unless it is not asked for or already complete; returns its
        seconds. It fingerprints every unit (reading back what an interrupted run wrote), since
        duplicates are found across all of them."""
        config = self.context.config
        if not cleans(config) or is_cleaned(self.context):
            return 0.0
        started = time.time()
        units = list(self.plan.units)
        print(f"prepare: cleaning {len(units)} units ({_cleaning_rules(config)})", file=sys.stderr)
        everything = {u.index for u in units}

        def cleaned() -> set[int]:
            return everything if is_cleaned(self.context) else set()

        self.run(CLEANING, units, cleaned)
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
            already_tokens=sum(r.tokens for r in done.values()),
            interval=1.0 if storage.is_local(output_dir) else 10.0,
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
