"""`python -m pipeline prepare`: plan, check the output directory, run the units, finalize.

The launcher reads metadata only; the workers read the data. Units finished by an earlier,
interrupted run are skipped, so a crash costs only the unfinished units. Every option that is not
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
import tempfile
import time

from apache_beam.options.pipeline_options import StandardOptions

from pipeline.cli import config_file

from pipeline.dataset import storage
from pipeline.cli.commands import HelpFormatter
from pipeline.cli.config_file import add_option as add_config_option
from pipeline.cli.flag_errors import flag_message, flags_of
from pipeline.cli.log_cadence import format_count, format_duration
from pipeline.dataset.manifest_io import shard_sizes
from pipeline.prepare.execution import beam_job
from pipeline.prepare.read import hub_filesystem
from pipeline.prepare.execution import watch as job
from pipeline.prepare.clean.dry_run import dry_run_report
from pipeline.prepare.clean.eval_sets import EvalSet, EvalSetError
from pipeline.prepare.clean.job import build_cleaning, is_cleaned
from pipeline.prepare.clean.quality_filters import FilterError, check_filters, parse_parameter
from pipeline.prepare.clean.removals import cleans
from pipeline.prepare.execution.failures import read_failures, remote_failures_dir
from pipeline.prepare.write.finalize import (
    FinalizeError,
    finished_unit_indices,
    finished_units,
    forget_units,
    is_complete,
    write_outputs,
)
from pipeline.prepare.write.output_dir import (
    COMPLETE,
    OutputError,
    earlier_hub_revisions,
    prepare_output_dir,
)
from pipeline.prepare.planning import Plan, make_plan
from pipeline.prepare.execution.progress import Progress
from pipeline.prepare.read import SourceError
from pipeline.prepare.units import UnitResult
from pipeline.prepare.tokenize.unit import RunContext
from pipeline.prepare.execution.worker_environment import package_versions, staging_options, version_differences
from pipeline.tokenization import is_path_spec
from pipeline.tokenization.hub import is_hub_spec, pin
from schemas import formats
from schemas.manifest import DEDUP_MODES, FILTER_NAMES, INPUT_FORMATS, Manifest, PrepareConfig, near_threshold


class PrepareError(RuntimeError):
    """An expected failure of a run, reported as one line; `details` (a traceback) with --verbose."""

    def __init__(self, message: str, details: str = ""):
        super().__init__(message)
        self.details = details


def parser(prog: str = "tokshards prepare") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Tokenize corpora into ArrayRecord shards with a resumable manifest. Other options go\n"
        "to Beam (e.g. --runner=DataflowRunner --project ... --region ... --temp_location gs://...).",
        formatter_class=HelpFormatter,
        allow_abbrev=False,
    )
    defaults = PrepareConfig()
    add = parser.add_argument
    add_config_option(parser)
    add("--input", action="append", required=True, help="file, glob, directory or hub id; repeatable")
    add("--output", required=True, help="output directory (local or any Beam filesystem)")
    add("--format", choices=INPUT_FORMATS, default=None, help="input format (default: from the file name)")
    add("--tokenizer", default=defaults.tokenizer,
        help="tiktoken name, tokenizer.json (or its directory), or a tiktoken spec file (.json/.toml)")
    add("--bos-token", default=defaults.bos_token,
        help="special token before each document ('none': no BOS; default: the tokenizer's rule)")
    add("--eos-token", default=defaults.eos_token,
        help="special token after each document (default: the tokenizer's rule)")
    add("--text-field", default=defaults.text_field, help="the field or column holding the text (JSONL, Parquet, hf)")
    add("--id-field", default=defaults.id_field,
        help="field or column naming each record, given with every removed document in removals.jsonl")
    add("--separator", default=defaults.separator, help="document separator line (text format)")
    add("--validation-fraction", type=float, default=defaults.validation_fraction,
        help="share of documents in the validation split, chosen by a hash of each document")
    add("--seed", type=int, default=defaults.seed, help="salts the split hash and unit shuffles")
    add("--unit-bytes", type=int, default=defaults.unit_bytes, help="target input bytes per unit")
    add("--record-tokens", type=int, default=defaults.record_tokens,
        help="tokens per ArrayRecord record, the loader's unit of reading")
    add("--max-document-bytes", type=int, default=defaults.max_document_bytes,
        help="longer documents are cut into pieces at a whitespace")
    add("--hf-split", default=defaults.hf_split, help="Hugging Face dataset split to read")
    add("--hf-name", default=defaults.hf_name, help="Hugging Face dataset config name (default: the dataset's default)")
    add("--hf-revision", default=None,
        help="branch, tag or commit of hub datasets (default: what an unfinished run here pinned, else main)")
    add("--dedup", choices=DEDUP_MODES, default=defaults.dedup,
        help="remove exact duplicates (normalized text), or exact and near duplicates (MinHash); the first copy is kept")
    add("--near-ngram", type=int, default=defaults.near_ngram, help="words per shingle for --dedup near")
    add("--near-bands", type=int, default=defaults.near_bands, help="MinHash bands for --dedup near")
    add("--near-rows", type=int, default=defaults.near_rows,
        help="MinHash rows per band for --dedup near (similarity threshold about (1/bands)^(1/rows))")
    add("--decontaminate", type=_paths, default=defaults.decontaminate, metavar="PATH[,PATH...]",
        help="eval files (JSONL, JSON, Parquet, text; .gz/.zst too): remove documents sharing a word n-gram with "
        "any of their examples")
    add("--decontaminate-ngram", type=int, default=defaults.decontaminate_ngram,
        help="words per n-gram for --decontaminate")
    add("--decontaminate-max-matches", type=int, default=defaults.decontaminate_max_matches,
        help="an eval n-gram in more documents than this is common text and removes none (listed in common_ngrams.jsonl)")
    # Switches that --no-... turns off again, over a config file.
    switch = argparse.BooleanOptionalAction
    add("--filter", dest="filters", type=_names, default=defaults.filters, metavar="NAME[,NAME...]",
        help=f"quality filters (datatrove's), run in this order on whole documents before dedup: {', '.join(FILTER_NAMES)}")
    add("--filter-param", dest="filter_params", action="append", type=_parameter, default=[], metavar="NAME.KEY=VALUE",
        help="a filter's parameter, a keyword argument of its datatrove class (VALUE read as JSON), e.g. "
        "gopher-quality.min_doc_words=30; repeatable")
    add("--filter-max-document-bytes", type=int, default=defaults.filter_max_document_bytes,
        help="longer documents are removed (filter:too_long) instead of being held whole for the filters")
    add("--filter-dry-run", action=switch, default=False,
        help="run the cleaning stage only and print what each rule removes, with samples; write no shards")
    add("--skip-bad-files", action=switch, default=False, help="record unreadable inputs as skipped")
    add("--overwrite", action=switch, default=False, help="replace what an earlier prepare run wrote in --output")
    add("--verbose", action=switch, default=False, help="tracebacks with errors")
    return parser


def _paths(value: str) -> list[str]:
    """Comma-separated paths, local ones made absolute: the config names them wherever it runs."""
    return [p if not storage.is_local(p) else os.path.abspath(p) for p in value.split(",") if p]


def _names(value: str) -> list[str]:
    return [name for name in value.split(",") if name]


def _parameter(value: str) -> tuple[str, str, object]:
    try:
        return parse_parameter(value)
    except FilterError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _filter_params(given: list[tuple[str, str, object]]) -> dict[str, dict[str, object]]:
    """`--filter-param` values by filter, keys sorted: the config is the same however they were ordered."""
    params: dict[str, dict[str, object]] = {}
    for name, key, value in given:
        params.setdefault(name, {})[key] = value
    return {name: dict(sorted(values.items())) for name, values in sorted(params.items())}


def parse_args(argv: list[str] | None, prog: str = "tokshards prepare") -> tuple[argparse.Namespace, list[str]]:
    """Our settings (from --config FILE, overridden by flags) and the options that go to Beam."""
    argv = sys.argv[1:] if argv is None else argv
    try:
        args, pipeline_args = config_file.parse(lambda: parser(prog), argv, known=True)
        own = [s for action in parser(prog)._actions for s in action.option_strings]
        beam_job.check_beam_args(pipeline_args, own)
    except ValueError as e:
        raise PrepareError(str(e)) from None
    return args, pipeline_args


def main(argv: list[str], prog: str = "tokshards prepare") -> int:
    # Beam's local job service relays every worker's log lines; keep the progress readable.
    logging.getLogger("apache_beam.runners.portability").setLevel(logging.ERROR)
    try:
        run(argv, prog)
    except PrepareError as e:
        if e.details:
            print(e.details, file=sys.stderr)
        print(f"prepare: error: {e}", file=sys.stderr)
        return 1
    return 0


def _config(args: argparse.Namespace) -> PrepareConfig:
    """Every config field has the option of the same name (`--unit-bytes` for `unit_bytes`). A
    tokenizer file is recorded by its absolute path, so the trainer finds it from anywhere; a hub
    model by the commit its revision names now."""
    values = {f.name: getattr(args, f.name) for f in dataclasses.fields(PrepareConfig)}
    try:
        config = PrepareConfig(**{**values, "filter_params": _filter_params(args.filter_params)})
    except ValueError as e:
        raise PrepareError(flag_message(str(e), flags_of(parser()))) from None
    if config.filters or config.filter_params:
        check_filters(config.filters, config.filter_params)
    if is_path_spec(config.tokenizer):
        config = dataclasses.replace(config, tokenizer=os.path.abspath(config.tokenizer))
    if is_hub_spec(config.tokenizer):
        config = dataclasses.replace(config, tokenizer=pin(config.tokenizer))
    return config


def _bytes_read() -> int:
    """Bytes this process has read through read() calls so far (Linux), to show what planning costs."""
    try:
        with open("/proc/self/io") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("rchar:"))
    except OSError:
        return 0


def worker_extras(plan: Plan) -> tuple[str, ...]:
    """The extras the workers need beyond the base install: the Hugging Face client for hub files,
    datatrove for quality filters, sentencepiece for a SentencePiece model."""
    hub = any(i.path.startswith(f"{hub_filesystem.SCHEME}://") for i in plan.inputs)
    sentencepiece = plan.tokenizer.library == "sentencepiece"
    return ("hf",) * hub + ("filters",) * bool(plan.config.filters) + ("sentencepiece",) * sentencepiece


def check_same_packages(output_dir: str, done: dict[int, UnitResult], installed: dict[str, str]) -> None:
    """Refuses to resume units written under other package versions than those installed now: the
    run's shards would mix two tokenizers or writers. Checked before any unit runs."""
    for result in done.values():
        differences = version_differences(result.package_versions, installed)
        if differences:
            listed = ", ".join(f"{name} {old} (installed: {new})" for name, old, new in differences)
            raise PrepareError(
                f"{output_dir} holds an unfinished run started with other package versions: {listed}; "
                "install the versions it was started with to resume it, or pass --overwrite to start again"
            )


def _run_pending(plan: Plan, output_dir: str, pipeline_args: list[str], verbose: bool, dry_run: bool = False) -> dict:
    """Runs the units not done yet; returns what run_info.json records of it. A dry run runs the
    cleaning stage alone and returns its report.

    A unit is done if its record is of this plan and every shard it names is in place; any other
    record is deleted first, so that its unit runs again instead of reading as finished.
    """
    sizes = shard_sizes(output_dir)
    recorded = finished_units(output_dir)
    done = {i: r for i, r in recorded.items() if r.plan == plan.fingerprint() and is_complete(r, sizes)}
    check_same_packages(output_dir, done, package_versions(worker_extras(plan)))
    forget_units(output_dir, sorted(set(recorded) - set(done)))
    pending = [u for u in plan.units if u.index not in done]
    print(
        f"prepare: {len(plan.inputs)} inputs, {len(plan.units)} units ({len(done)} already done), "
        f"tokenizer {plan.tokenizer.name}, dtype {plan.dtype}",
        file=sys.stderr,
    )
    seen: dict[int, UnitResult] = {}

    def poll() -> tuple[int, int]:
        seen.update(finished_units(output_dir, seen))
        return len(seen), sum(r.tokens for r in seen.values())

    started = time.time()
    restarts = 0
    extras = worker_extras(plan)
    with tempfile.TemporaryDirectory(prefix="prepare-") as scratch:
        try:
            staging = staging_options(pipeline_args, scratch, extras)
        except (ValueError, RuntimeError) as e:
            raise PrepareError(str(e)) from None
        options = beam_job.pipeline_options(pipeline_args + staging)
        local = beam_job.is_local_runner(options)
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
        cleaning_seconds = _run_cleaning(plan, context, options, local, verbose)
        if dry_run:
            return {"report": dry_run_report(context, list(plan.units))}
        if pending:
            progress = Progress(
                poll,
                len(plan.units),
                already_done=len(done),
                already_tokens=sum(r.tokens for r in done.values()),
                interval=1.0 if storage.is_local(output_dir) else 10.0,
            )
            try:
                if local:
                    restarts = job.run_local(
                        pending, context, options, lambda: finished_unit_indices(output_dir), progress.tick
                    )
                else:
                    job.run_remote(
                        pending, context, options, lambda: finished_unit_indices(output_dir), progress.tick
                    )
            except job.JobError as e:
                raise PrepareError(f"{e}; the units done are kept, and a rerun resumes", e.details if verbose else "") from None
            progress.finish()
        failures = read_failures(context.failures_dir)
    if failures:
        more = f" (and {len(failures) - 1} more failed units)" if len(failures) > 1 else ""
        raise PrepareError(
            f"{failures[0].message}{more}; the units done are kept, and a rerun resumes",
            failures[0].traceback if verbose else "",
        )
    return {
        "units_run": len(pending),
        "units_resumed": len(done),
        "job_restarts": restarts,
        "cleaning_seconds": cleaning_seconds,
        "tokenize_seconds": time.time() - started - cleaning_seconds,
        "runner": options.view_as(StandardOptions).runner or "FnApiRunner",
        "pipeline_args": pipeline_args,
    }


def _run_cleaning(plan: Plan, context: RunContext, options, local: bool, verbose: bool) -> float:
    """Runs the cleaning job unless it is not asked for or already complete; returns its seconds.
    It fingerprints every unit (reading back what an interrupted run wrote), since duplicates are
    found across all of them."""
    if not cleans(plan.config) or is_cleaned(context):
        return 0.0
    started = time.time()
    print(f"prepare: cleaning {len(plan.units)} units ({_cleaning_rules(plan.config)})", file=sys.stderr)
    units = list(plan.units)
    everything = {u.index for u in units}

    def cleaned() -> set[int]:
        return everything if is_cleaned(context) else set()

    try:
        run = job.run_local if local else job.run_remote
        run(units, context, options, cleaned, lambda: None, build_cleaning)
    except job.JobError as e:
        raise PrepareError(f"{e}; the fingerprints done are kept, and a rerun resumes", e.details if verbose else "") from None
    failures = read_failures(context.failures_dir)
    if failures:
        raise PrepareError(f"{failures[0].message}; the fingerprints done are kept, and a rerun resumes",
                           failures[0].traceback if verbose else "")
    return time.time() - started


def _cleaning_rules(config: PrepareConfig) -> str:
    rules = [f"filters {','.join(config.filters)}"] if config.filters else []
    rules.append(f"dedup {config.dedup}")
    if config.dedup == "near":
        rules[-1] += (f": word {config.near_ngram}-grams, {config.near_bands} bands x {config.near_rows} rows, "
                     f"threshold about {near_threshold(config.near_bands, config.near_rows):.2f}")
    if config.decontaminate:
        rules.append(f"{len(config.decontaminate)} eval files, {config.decontaminate_ngram}-grams in at most "
                     f"{config.decontaminate_max_matches} documents")
    return "; ".join(rules)


def _eval_set(config: PrepareConfig) -> EvalSet | None:
    """The eval files read as workers will read them: a file that cannot match is refused now."""
    if not config.decontaminate:
        return None
    return EvalSet(tuple(config.decontaminate), config.decontaminate_ngram, config.separator)


def run(argv: list[str] | None = None, prog: str = "tokshards prepare") -> Manifest | None:
    """Plan, run the unfinished units, write the manifest (None for a dry run). Raises PrepareError
    on expected failures."""
    args, pipeline_args = parse_args(argv, prog)
    started = time.time()
    try:
        config = _config(args)
        output_dir = args.output if not storage.is_local(args.output) else os.path.abspath(args.output)
        pinned = {} if args.overwrite else earlier_hub_revisions(output_dir)
        if args.hf_revision:
            pinned = {spec: args.hf_revision for spec in args.input}
        read_before = _bytes_read()
        plan = make_plan(args.input, config, pinned)
        planning = {"planning_seconds": time.time() - started, "planning_bytes_read": _bytes_read() - read_before}
        evals = _eval_set(config)
        state = prepare_output_dir(output_dir, plan, overwrite=args.overwrite)
    except FileNotFoundError as e:
        raise PrepareError(f"{e.filename or e}: no such file; check --input and --decontaminate") from None
    except (ValueError, SourceError, OutputError, OSError, EvalSetError) as e:
        raise PrepareError(str(e)) from None
    if state == COMPLETE:
        print(f"{output_dir} is already complete for these inputs and config; nothing to do", file=sys.stderr)
        return Manifest.from_json(storage.read_text(storage.join(output_dir, formats.MANIFEST_NAME)))
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
        manifest = write_outputs(output_dir, plan, run_info, package_versions(worker_extras(plan)), evals)
    except (FinalizeError, OSError) as e:
        raise PrepareError(str(e)) from None
    print(summary(manifest, output_dir, time.time() - started), file=sys.stderr)
    return manifest


def _dry_run(plan: Plan, output_dir: str, pipeline_args: list[str], verbose: bool) -> None:
    """Prints what the cleaning stage removes. Its work is kept in the output directory: a run with
    the same inputs and config, without --filter-dry-run, goes on to tokenize from there."""
    if not cleans(plan.config):
        raise PrepareError("--filter-dry-run needs a cleaning rule: --filter (or --dedup, --decontaminate)")
    try:
        ran = _run_pending(plan, output_dir, pipeline_args, verbose, dry_run=True)
    except OSError as e:
        raise PrepareError(str(e)) from None
    print(ran["report"])
    print(f"dry run: no shards written; rerun without --filter-dry-run to write them (the cleaning done in "
          f"{output_dir} is kept), or with other rules and --overwrite", file=sys.stderr)


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
        lines.append("  removed: " + json.dumps(manifest.removed, sort_keys=True) + " (listed in removals.jsonl)")
    return "\n".join(lines)
