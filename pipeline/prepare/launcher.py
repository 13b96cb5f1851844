"""`python -m pipeline prepare`: plan, check the output directory, run the stages, finalize, sum up.

The launcher reads metadata only; the workers read the data. Units finished by an earlier,
interrupted run are skipped (`resume`), so a crash costs only the unfinished units; where and how
the stages run, and how their failures are told, is `stages`'s. Every option that is not
ours goes to Beam, and one that Beam does not know either is refused.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import platform
import resource
import sys
import time

from pipeline.cli.log_cadence import format_count, format_duration
from pipeline.dataset import storage
from pipeline.prepare import command_line
from pipeline.prepare.clean.decontamination.eval_sets import EvalSet, EvalSetError
from pipeline.prepare.clean.dry_run import dry_run_report
from pipeline.prepare.clean.quality.quality_filters import check_filters
from pipeline.prepare.clean.removals import cleans
from pipeline.prepare.clean.web.fasttext_models import pinned
from pipeline.prepare.execution import beam_options, early_job
from pipeline.prepare.execution.worker_environment import package_versions
from pipeline.prepare.planning import Plan, make_plan, worker_extras
from pipeline.prepare.read import SourceError
from pipeline.prepare.resume import done_units
from pipeline.prepare.stages import PrepareError, stage_runner
from pipeline.prepare.write.finalize import FinalizeError, write_outputs
from pipeline.prepare.write.output_dir import (
    COMPLETE,
    OutputError,
    earlier_hub_revisions,
    prepare_output_dir,
)
from pipeline.tokenization import absolute_spec, load_tokenizer
from pipeline.tokenization.hub import is_hub_spec, pin
from schemas import formats
from schemas.errors import UsageError
from schemas.manifest import Manifest
from schemas.prepare_config import PrepareConfig


def parse_args(
    argv: list[str] | None, prog: str = "tokshards prepare"
) -> tuple[argparse.Namespace, list[str]]:
    """Our settings (from --config FILE, overridden by flags) and the options that go to Beam, which
    it must know."""
    argv = sys.argv[1:] if argv is None else argv
    args, pipeline_args = command_line.read(argv, prog)
    own = [s for action in command_line.parser(prog)._actions for s in action.option_strings]
    try:
        beam_options.check_beam_args(pipeline_args, own)
    except ValueError as e:
        raise UsageError(str(e)) from None
    return args, pipeline_args


def main(argv: list[str], prog: str = "tokshards prepare") -> int:
    # Beam's local job service relays every worker's log lines; keep the progress readable.
    logging.getLogger("apache_beam.runners.portability").setLevel(logging.ERROR)
    run(argv, prog)
    return 0


def _config(args: argparse.Namespace) -> PrepareConfig:
    """Every config field has the option of the same name (`--unit-bytes` for `unit_bytes`). A
    tokenizer file and local eval files are recorded by their absolute paths, so the trainer finds
    them from anywhere; a hub model by the commit its revision names now."""
    config = command_line.settings(args)
    evals = [p if not storage.is_local(p) else os.path.abspath(p) for p in config.decontaminate]
    config = dataclasses.replace(config, decontaminate=evals)
    if config.filters or config.filter_params:
        config = _pinned_models(config)
        check_filters(
            config.filters, config.filter_params, config.filter_impl, config.language_model
        )
    config = dataclasses.replace(config, tokenizer=absolute_spec(config.tokenizer))
    if is_hub_spec(config.tokenizer):
        config = dataclasses.replace(config, tokenizer=pin(config.tokenizer))
    return config


def _pinned_models(config: PrepareConfig) -> PrepareConfig:
    """The web filters' fastText models as the config records them: a file by its absolute path, a
    hub file by the commit its revision names now."""
    if config.language_model:
        config = dataclasses.replace(config, language_model=pinned(config.language_model))
    classifier = config.filter_params.get("fasttext", {})
    if classifier.get("model_url"):
        params = {**config.filter_params, "fasttext": {**classifier}}
        params["fasttext"]["model_url"] = pinned(str(classifier["model_url"]))
        config = dataclasses.replace(config, filter_params=params)
    return config


def _bytes_read() -> int:
    """Bytes this process has read through read() calls so far (Linux), to show what planning
    costs."""
    try:
        with open("/proc/self/io") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("rchar:"))
    except OSError:
        return 0


def _run_pending(
    plan: Plan, output_dir: str, pipeline_args: list[str], verbose: bool, dry_run: bool = False
) -> dict:
    """Runs the cleaning stage and the units not done yet; returns what run_info.json records of
    them. A dry run runs the cleaning stage alone and returns its report."""
    done = done_units(plan, output_dir)
    pending = [u for u in plan.units if u.index not in done]
    print(
        f"prepare: {len(plan.inputs)} inputs, {len(plan.units)} units ({len(done)} already done), "
        f"tokenizer {plan.tokenizer.name}, dtype {plan.dtype}",
        file=sys.stderr,
    )
    config = plan.config
    note = load_tokenizer(
        config.tokenizer, bos_token=config.bos_token, eos_token=config.eos_token
    ).engine_note
    if note:  # which engine encodes a tokenizer.json, and why not tiktoken
        print(f"prepare: tokenizer {note}", file=sys.stderr)
    started = time.time()
    with stage_runner(plan, output_dir, pipeline_args, verbose) as stages:
        cleaning_seconds = stages.clean(dry_run)
        if dry_run:
            return {"report": dry_run_report(stages.context, list(plan.units))}
        restarts = stages.tokenize(pending, done)
    return {
        "units_run": len(pending),
        "units_resumed": len(done),
        "job_restarts": restarts,
        "job_started_with_command": early_job.taken(),
        "cleaning_seconds": cleaning_seconds,
        "tokenize_seconds": time.time() - started - cleaning_seconds,
        "runner": stages.runner,
        "pipeline_args": pipeline_args,
    }


def _eval_set(config: PrepareConfig) -> EvalSet | None:
    """The eval files read as workers will read them: a file that cannot match is refused now."""
    if not config.decontaminate:
        return None
    return EvalSet(tuple(config.decontaminate), config.decontaminate_ngram, config.separator)


def run(argv: list[str] | None = None, prog: str = "tokshards prepare") -> Manifest | None:
    """Plan, run the unfinished units, write the manifest (None for a dry run). Raises a UsageError
    for settings it cannot run with, and PrepareError on other expected failures."""
    args, pipeline_args = parse_args(argv, prog)
    started = time.time()
    try:
        config = _config(args)
        output_dir = (
            args.output if not storage.is_local(args.output) else os.path.abspath(args.output)
        )
        pinned = {} if args.overwrite else earlier_hub_revisions(output_dir)
        if args.hf_revision:
            pinned = {spec: args.hf_revision for spec in args.input}
        read_before = _bytes_read()
        plan = make_plan(args.input, config, pinned)
        planning = {
            "planning_seconds": time.time() - started,
            "planning_bytes_read": _bytes_read() - read_before,
        }
        evals = _eval_set(config)
        state = prepare_output_dir(output_dir, plan, overwrite=args.overwrite)
    except UsageError:
        raise
    except FileNotFoundError as e:
        raise PrepareError(
            f"{e.filename or e}: no such file; check --input and --decontaminate"
        ) from None
    except (ValueError, SourceError, OutputError, OSError, EvalSetError) as e:
        raise PrepareError(str(e)) from None
    if state == COMPLETE:
        print(
            f"{output_dir} is already complete for these inputs and config; nothing to do",
            file=sys.stderr,
        )
        return Manifest.from_json(
            storage.read_text(storage.join(output_dir, formats.MANIFEST_NAME))
        )
    if args.filter_dry_run:
        return _dry_run(plan, output_dir, pipeline_args, args.verbose)
    try:
        ran = _run_pending(plan, output_dir, pipeline_args, args.verbose)
        run_info = {
            "started_unix": started,
            "finished_unix": time.time(),
            "seconds": time.time() - started,
            **planning,
            **ran,
            "host": platform.node(),
            "launcher_peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        }
        manifest = write_outputs(
            output_dir, plan, run_info, package_versions(worker_extras(plan)), evals
        )
    except (FinalizeError, OSError) as e:
        raise PrepareError(str(e)) from None
    print(summary(manifest, output_dir, time.time() - started), file=sys.stderr)
    return manifest


def _dry_run(plan: Plan, output_dir: str, pipeline_args: list[str], verbose: bool) -> None:
    """Prints what the cleaning stage removes. Its work is kept in the output directory: a run with
    the same inputs and config, without --filter-dry-run, goes on to tokenize from there."""
    if not cleans(plan.config):
        raise PrepareError(
            "--filter-dry-run needs a cleaning rule: --filter (or --dedup, --decontaminate)"
        )
    try:
        ran = _run_pending(plan, output_dir, pipeline_args, verbose, dry_run=True)
    except OSError as e:
        raise PrepareError(str(e)) from None
    print(ran["report"])
    print(
        "dry run: no shards written; rerun without --filter-dry-run to write them (the cleaning "
        f"done in {output_dir} is kept), or with other rules and --overwrite",
        file=sys.stderr,
    )


def summary(manifest: Manifest, output_dir: str, seconds: float) -> str:
    lines = [f"wrote {output_dir} in {format_duration(seconds)}"]
    for split, totals in manifest.totals.items():
        lines.append(
            f"  {split}: {totals.documents} documents, {format_count(totals.tokens)} tokens, "
            f"{totals.records} records in {totals.shards} shards"
        )
    tokens = sum(t.tokens for t in manifest.totals.values())
    lines.append(f"  {format_count(tokens / seconds if seconds else 0)} tokens/s overall")
    if manifest.skipped:
        lines.append("  skipped: " + json.dumps(manifest.skipped, sort_keys=True))
    if manifest.counts:
        lines.append("  counts: " + json.dumps(manifest.counts, sort_keys=True))
    if manifest.removed:
        lines.append(
            "  removed: "
            + json.dumps(manifest.removed, sort_keys=True)
            + " (listed in removals.jsonl)"
        )
    return "\n".join(lines)
