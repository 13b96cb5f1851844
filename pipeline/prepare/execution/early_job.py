"""The local job's process, started with the command, before the launcher imports Beam.

A run's way to its first unit is serial: the launcher imports Beam (about a second), resolves its
settings and plans, then starts the job, which loads what its workers need before it forks them.
Where the run's filters split words, that load is spaCy's import (most of a second). So such a run's
job process is forked first instead, while the launcher is still one thread with little imported: it
imports Beam and spaCy and loads the tokenizer on another core while the launcher imports Beam and
plans, then waits for its job. `watch` hands it the run's first local job; the job is the same, only
where its process came from differs. A run that needs no local job (a remote runner, an output
already complete, settings refused) stops it, and it dies with the launcher however the launcher
ends.

Nothing here imports Beam: this module is loaded before it.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import multiprocessing.connection
import os

from pipeline.cli import interrupts
from pipeline.forking import die_with_parent, fork_is_safe
from schemas.prepare_config import PrepareConfig, splits_words


@dataclasses.dataclass(frozen=True)
class EarlyJob:
    """The started process, and the launcher's ends of its pipes: the job goes down `jobs` once;
    a job that fails sends its error up `errors`."""

    process: multiprocessing.Process
    jobs: multiprocessing.connection.Connection
    errors: multiprocessing.connection.Connection

    def stop(self) -> None:
        self.jobs.close()
        self.process.kill()
        self.process.join()


_started: EarlyJob | None = None
_taken = False


def start(config: PrepareConfig) -> None:
    """Starts the job's process now if the run's filters split words and forking is safe."""
    global _started
    if _started is not None or not splits_words(config.filters) or not fork_is_safe():
        return
    fork = multiprocessing.get_context("fork")
    jobs_out, jobs_in = fork.Pipe(duplex=False)
    errors_out, errors_in = fork.Pipe(duplex=False)
    ends = (jobs_out, jobs_in, errors_out, errors_in)
    process = fork.Process(target=_wait_for_job, args=(ends, os.getpid(), config), daemon=False)
    with interrupts.ignored_in_children():
        process.start()
    jobs_out.close()
    errors_in.close()
    _started = EarlyJob(process, jobs_in, errors_out)


def hand(job: tuple) -> EarlyJob | None:
    """Gives the started process its job, once: the process, or None where none was started or it
    died before its job came (the caller then starts the job afresh)."""
    global _started, _taken
    started, _started = _started, None
    if started is None:
        return None
    try:
        started.jobs.send(job)
        started.jobs.close()
    except OSError:
        started.stop()
        return None
    _taken = True
    return started


def taken() -> bool:
    """Whether a local job of this process ran in the process started with the command."""
    return _taken


def stop() -> None:
    """Stops a started process that was given no job."""
    global _started
    started, _started = _started, None
    if started is not None:
        started.stop()


def _wait_for_job(
    ends: tuple[multiprocessing.connection.Connection, ...], launcher: int, config: PrepareConfig
) -> None:
    interrupts.ignore_here()  # Ctrl-C is the launcher's to act on
    die_with_parent()
    jobs, launcher_jobs, launcher_errors, errors = ends
    launcher_jobs.close()  # so that the launcher's end alone keeps the pipe open
    launcher_errors.close()
    if os.getppid() != launcher:
        return  # the launcher died before this process could ask to die with it
    try:
        from pipeline.cli.commands import import_beam_quietly
        from pipeline.prepare.clean.quality.quality_filters import preload
        from pipeline.tokenization import absolute_spec, is_hub_spec, load_tokenizer

        import_beam_quietly()
        from pipeline.prepare.execution import watch

        preload(config.filter_impl)
        if not is_hub_spec(config.tokenizer):  # a hub spec waits for the launcher to pin it
            load_tokenizer(
                absolute_spec(config.tokenizer),
                bos_token=config.bos_token,
                eos_token=config.eos_token,
            )
    except Exception:  # a missing extra, say: the job started afresh meets it and says so
        return
    try:
        units, context, options, build, stage_preload = jobs.recv()
    except EOFError:
        return  # the run needed no local job
    jobs.close()
    watch.run_job(units, context, options, build, stage_preload, errors)
