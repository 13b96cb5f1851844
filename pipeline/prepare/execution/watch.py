"""Running the units' pipeline under watch: it stops on a failure, restarts after a lost worker, and
never hangs.

Beam's in-process runner neither retries a bundle whose worker process died nor fails it: the run
waits forever. It also reports a failed bundle only after the other workers finish their share. So
locally the pipeline runs in a child process, which the launcher stops, with its worker processes,
as soon as a unit failure is recorded, or every unit is (Beam's teardown does no work we need), and
starts again on the units not done when a worker process or the child itself dies, a bounded number
of times. Units are idempotent, so the output is the same bytes as an uninterrupted run's. The child
stays in the launcher's process group and dies with the launcher, so no job outlives its launcher.

On a remote runner the runner owns its workers (Dataflow retries a lost worker's bundles); the
launcher watches for failures, cancelling the job when one is recorded, and for the job's end,
whatever state it ends in: some runners (Dask's) report no end until asked to wait for it.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import threading
import traceback
from collections.abc import Callable

import psutil
from apache_beam.options.pipeline_options import PipelineOptions

from pipeline.cli import interrupts
from pipeline.forking import die_with_parent, fork_is_safe
from pipeline.prepare.execution import early_job
from pipeline.prepare.execution.beam_units import Build, Preload, run_units, start_units
from pipeline.prepare.execution.failures import any_failure
from pipeline.prepare.execution.forked_workers import forked_worker_count
from pipeline.prepare.run_context import RunContext
from pipeline.prepare.units import WorkUnit
from schemas.errors import RunError

RESTARTS = 3
_LOCAL_POLL_SECONDS = 0.25
_REMOTE_POLL_SECONDS = 5.0
_END_GRACE_SECONDS = 60.0


class JobError(RunError, RuntimeError):
    """The pipeline itself failed (not a unit: those are recorded as unit failures); `details` holds
    its traceback."""


def run_job(
    units: list[WorkUnit],
    context: RunContext,
    options: PipelineOptions,
    build: Build,
    preload: Preload,
    errors: multiprocessing.connection.Connection,
) -> None:
    """The job process's life: runs the units; a failure of the pipeline itself goes up `errors`,
    and the process exits with 1."""
    interrupts.ignore_here()  # Ctrl-C is the launcher's to act on: it stops this job
    die_with_parent()
    try:
        run_units(units, context, options, build, preload)
    except BaseException as e:
        errors.send((f"{type(e).__name__}: {e}", traceback.format_exc()))
        raise SystemExit(1) from None


def _stop(process: multiprocessing.Process) -> None:
    """Kills the job and every process it started (its worker processes)."""
    try:
        tree = psutil.Process(process.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        tree = []
    process.kill()
    for child in tree:
        try:
            child.kill()
        except psutil.NoSuchProcess:
            pass
    process.join()


class _Workers:
    """The job's worker processes (its descendants); a death among them while units remain means a
    lost bundle. The job starts them all at once, so once some are found they are all there, and
    polling checks those alone instead of scanning the process table."""

    def __init__(self, job_pid: int, expected: int):
        self._job = psutil.Process(job_pid)
        self._expected = expected
        self._seen: list[psutil.Process] = []

    def lost(self) -> bool:
        if len(self._seen) < self._expected:
            try:
                self._seen = self._job.children(recursive=True)
            except psutil.Error:
                pass  # the job is exiting; its exit code tells the rest
        return any(not p.is_running() or p.status() == psutil.STATUS_ZOMBIE for p in self._seen)


def _start_method() -> str:
    """Forking skips a second import of Beam, where it is safe (`forking`); otherwise the job starts
    in a fresh interpreter."""
    return "fork" if fork_is_safe() else "spawn"


def _watch_local(
    units: list[WorkUnit],
    context: RunContext,
    options: PipelineOptions,
    finished: Callable[[], set[int]],
    tick: Callable[[], None],
    build: Build,
    preload: Preload,
) -> str:
    """Runs the job once, in the process started with the command if there is one (`early_job`);
    returns "done", "failed" (a unit failure is recorded) or "lost"."""
    job = (units, context, options, build, preload)
    early = early_job.hand(job)
    if early is not None:
        process, receive = early.process, early.errors
    else:
        start = multiprocessing.get_context(_start_method())
        receive, send = start.Pipe(duplex=False)
        process = start.Process(target=run_job, args=(*job, send), daemon=False)
        with interrupts.ignored_in_children():
            process.start()
        send.close()
    workers = _Workers(process.pid, forked_worker_count(options))
    wanted = {u.index for u in units}
    try:
        while True:
            if any_failure(context.failures_dir):
                return "failed"
            if wanted <= finished():
                return "done"
            if not process.is_alive():
                break
            if workers.lost():
                return "lost"
            tick()
            # Woken early when the job exits: it does once its last unit is done.
            multiprocessing.connection.wait([process.sentinel], _LOCAL_POLL_SECONDS)
    finally:
        _stop(process)
    if any_failure(context.failures_dir):
        return "failed"
    if receive.poll():
        try:
            message, details = receive.recv()
        except EOFError:
            pass
        else:
            raise JobError(f"the pipeline failed: {message}", details)
    if wanted <= finished():
        return "done"
    if process.exitcode == 0:
        missing = sorted(wanted - finished())
        raise JobError(f"the pipeline ended, but units {missing[:10]} left no record")
    return "lost"  # killed by a signal (the kernel's out-of-memory killer, say)


def run_local(
    units: list[WorkUnit],
    context: RunContext,
    options: PipelineOptions,
    finished: Callable[[], set[int]],
    tick: Callable[[], None],
    build: Build,
    preload: Preload,
) -> int:
    """Runs every unit, restarting on the units not done after a loss; returns the restarts made.
    `finished` lists the units recorded so far; `tick` is called while waiting; `build` makes the
    stage's pipeline, with what `preload` loads before the workers are forked."""
    restarts = 0
    while True:
        outcome = _watch_local(units, context, options, finished, tick, build, preload)
        if outcome != "lost":
            return restarts
        if restarts == RESTARTS:
            raise JobError(f"worker processes died {restarts + 1} times; rerun to resume")
        restarts += 1
        done = finished()
        units = [u for u in units if u.index not in done]


def run_remote(
    units: list[WorkUnit],
    context: RunContext,
    options: PipelineOptions,
    finished: Callable[[], set[int]],
    tick: Callable[[], None],
    build: Build,
) -> None:
    """Submits the units to the runner and watches them: returns once every unit is recorded (after
    the job ends, or a grace period for runners that report no end), or a unit failure is (the job
    is then cancelled). A job that ends in any state, or whose result raises, is noticed; whether
    the run succeeded is then the units' records' to say, never the runner's state alone."""
    result = start_units(units, context, options, build)
    ended = threading.Event()
    outcome: dict[str, str] = {}

    def wait() -> None:
        try:
            outcome["state"] = str(result.wait_until_finish())
        except BaseException as e:  # the job's own error; the records tell the rest
            outcome["state"] = f"{getattr(result, 'state', 'FAILED')}: {type(e).__name__}: {e}"
        finally:
            ended.set()

    threading.Thread(target=wait, name="job-waiter", daemon=True).start()
    wanted = {u.index for u in units}
    try:
        while not ended.is_set():
            if any_failure(context.failures_dir):
                result.cancel()
                return
            if wanted <= finished():
                ended.wait(
                    _END_GRACE_SECONDS
                )  # let the job end on its own: nothing it does now matters
                return
            tick()
            ended.wait(_REMOTE_POLL_SECONDS)
    except KeyboardInterrupt:
        result.cancel()  # a stopped launcher leaves no job behind; a rerun resumes
        raise
    if any_failure(context.failures_dir) or wanted <= finished():
        return
    missing = sorted(wanted - finished())
    raise JobError(
        f"the pipeline ended ({' '.join(outcome.get('state', 'no state').split())[:300]}) with "
        f"units {missing[:10]} unrecorded; see the runner's logs"
    )
