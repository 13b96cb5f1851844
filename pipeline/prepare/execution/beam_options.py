"""Beam's options for a prepare run: the ones we do not take, checked as Beam's own, and the local
runner's defaults.

Every option that is not prepare's goes to Beam; one that Beam does not know either is refused with
the nearest name, so a misspelt option of ours is never silently ignored; a misspelt runner is
refused so too, before the run starts, not in Beam's traceback once the job is built. A runner
named by its module path (Dask's) is imported first, so that its own options are known. Locally
the in-process Python runner is pinned: Beam's DirectRunner would first try to fetch and start its
Prism binary, and a machine with network access would then run another runner than the one tested.
"""

from __future__ import annotations

import argparse
import importlib
import os

from apache_beam.options.pipeline_options import (
    DirectOptions,
    PipelineOptions,
    StandardOptions,
    WorkerOptions,
)

from schemas.errors import closest

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


def _runner_of(pipeline_args: list[str]) -> str | None:
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    parser.add_argument("--runner")
    return parser.parse_known_args(pipeline_args)[0].runner


def check_runner_name(pipeline_args: list[str]) -> None:
    """Refuses a runner that Beam does not know by name, naming the nearest: Beam itself refuses it
    only once the job is built, in a traceback."""
    runner = _runner_of(pipeline_args)
    if not runner or "." in runner:
        return
    known = StandardOptions.KNOWN_RUNNER_NAMES
    if any(runner.lower() in (name.lower(), name.lower().removesuffix("runner")) for name in known):
        return
    near = closest(runner, known)
    hint = (
        f"; did you mean {near}?"
        if near
        else f" (Beam's runners: {', '.join(known)}, or a runner's class path)"
    )
    raise ValueError(f"unknown runner --runner={runner}{hint}")


def import_runner_module(pipeline_args: list[str]) -> None:
    """Imports the module of a runner named by its path (`--runner=package.module.Class`), so that
    its option classes (Dask's `--dask_client_address`) are known before the options are checked."""
    runner = _runner_of(pipeline_args)
    if runner and "." in runner:
        module = runner.rsplit(".", 1)[0]
        try:
            importlib.import_module(module)
        except ImportError as e:
            hint = " (pip install 'tokshards[dask]')" if "dask" in module else ""
            raise ValueError(f"--runner={runner}: cannot import {module}: {e}{hint}") from None


def check_beam_args(pipeline_args: list[str], own_flags: list[str]) -> None:
    """Refuses options Beam does not know either, naming the nearest one: a misspelt option of ours
    (`--validation_fraction`) would otherwise go to Beam and be silently ignored; so is a runner
    Beam does not know by name."""
    check_runner_name(pipeline_args)
    import_runner_module(pipeline_args)
    parser = _beam_option_parser()
    _, unknown = parser.parse_known_args(pipeline_args)
    flags = [a.split("=", 1)[0] for a in unknown if a.startswith("-")]
    if not flags:
        if unknown:
            raise ValueError(f"unexpected argument {unknown[0]!r}")
        return
    known = own_flags + [s for a in parser._actions for s in a.option_strings]
    near = closest(flags[0].replace("_", "-"), [k.replace("_", "-") for k in known])
    hint = ""
    if near:
        spelled = next(k for k in known if k.replace("_", "-") == near)
        hint = f" (did you mean {spelled}?)"
    raise ValueError(f"unknown flag {flags[0]}{hint}")  # as every command's parser says it


def is_local_runner(options: PipelineOptions) -> bool:
    return options.view_as(StandardOptions).runner in LOCAL_RUNNERS


def runner_name(options: PipelineOptions) -> str:
    """The runner as run_info.json records it."""
    return options.view_as(StandardOptions).runner or "FnApiRunner"


def pipeline_options(pipeline_args: list[str]) -> PipelineOptions:
    """Locally: every core, in worker processes, workers that speak only of problems. On Dask: a
    partition per unit. Elsewhere: the user's options."""
    options = PipelineOptions(pipeline_args)
    runner = options.view_as(StandardOptions).runner or ""
    partitioned = any(
        a.startswith(("--dask_npartitions", "--dask_partition_size")) for a in pipeline_args
    )
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
