"""`prepare`: raw corpora to tokenized ArrayRecord shards and a manifest, as a Beam pipeline.

The launcher plans (fingerprints inputs, cuts work units), checks the output directory, runs one
Beam element per unfinished unit, then writes the manifest from the unit records. Units finished
by an earlier, interrupted run are skipped, so a crash costs only the unfinished units.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time

import apache_beam as beam
from apache_beam.metrics import Metrics
from apache_beam.options.pipeline_options import (
    DirectOptions,
    PipelineOptions,
    SetupOptions,
    StandardOptions,
    WorkerOptions,
)

from pipeline import storage
from pipeline.prepare.finalize import finished_units, write_outputs
from pipeline.prepare.planning import Plan, make_plan, prepare_output_dir
from pipeline.prepare.progress import PollingProgress, format_count, format_duration
from pipeline.prepare.sources import SourceError
from pipeline.prepare.worker import process_unit
from pipeline.prepare.units import UnitResult, WorkUnit
from schemas import formats
from schemas.manifest import INPUT_FORMATS, Manifest, PrepareConfig

FAILURES_DIR = "failures"


class PrepareError(RuntimeError):
    """An expected failure of a run, reported as one line."""


class PrepareUnitFn(beam.DoFn):
    """One element is one whole unit: per-element overhead is paid once per ~16 MB of input."""

    def __init__(self, config: PrepareConfig, *, dtype_name: str, num_units: int, output_dir: str):
        self._config = config
        self._dtype_name = dtype_name
        self._num_units = num_units
        self._output_dir = output_dir
        self._documents = Metrics.counter("prepare", "documents")
        self._tokens = Metrics.counter("prepare", "tokens")
        self._units = Metrics.counter("prepare", "units")

    def process(self, unit: WorkUnit):
        try:
            result = process_unit(
                unit,
                self._config,
                dtype_name=self._dtype_name,
                num_units=self._num_units,
                output_dir=self._output_dir,
            )
        except SourceError as e:
            # Left for the launcher, which reports it in one line whatever the runner.
            storage.write_bytes_atomic(
                storage.join(self._output_dir, formats.STATE_DIR, FAILURES_DIR, f"{unit.index:05d}.txt"),
                str(e).encode(),
            )
            raise
        self._units.inc()
        self._documents.inc(sum(s.documents for s in result.shards))
        self._tokens.inc(result.tokens)
        yield result.unit


def is_complete(result: UnitResult, output_dir: str) -> bool:
    """A unit is done if its record exists and every shard it names is there at its size."""
    for shard in result.shards:
        path = storage.join(output_dir, shard.path)
        if not storage.exists(path) or storage.size(path) != shard.bytes:
            return False
    return True


def default_runner_options(pipeline_args: list[str]) -> PipelineOptions:
    """Locally: the DirectRunner on every core. Elsewhere: the user's options, plus setup.py."""
    options = PipelineOptions(pipeline_args)
    standard = options.view_as(StandardOptions)
    if standard.runner in (None, "DirectRunner", "direct"):
        direct = options.view_as(DirectOptions)
        if not any(a.startswith("--direct_num_workers") for a in pipeline_args):
            direct.direct_num_workers = os.cpu_count() or 1
        if not any(a.startswith("--direct_running_mode") for a in pipeline_args):
            direct.direct_running_mode = "multi_processing"
        workers = options.view_as(WorkerOptions)
        if workers.default_sdk_harness_log_level is None:
            workers.default_sdk_harness_log_level = "WARNING"  # keep the progress line readable
    else:
        setup = options.view_as(SetupOptions)
        here = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "setup.py")
        if setup.setup_file is None and os.path.exists(here):
            setup.setup_file = here
    return options


def run_units(plan: Plan, units: list[WorkUnit], output_dir: str, options: PipelineOptions) -> None:
    with beam.Pipeline(options=options) as pipeline:
        (
            pipeline
            # Create redistributes its elements (a reshuffle), so units spread over all workers.
            | "Units" >> beam.Create(units)
            | "TokenizeAndWrite"
            >> beam.ParDo(
                PrepareUnitFn(
                    plan.config, dtype_name=plan.dtype, num_units=len(plan.units), output_dir=output_dir
                )
            )
        )


def _failure_message(output_dir: str) -> str | None:
    paths = storage.list_files(storage.join(output_dir, formats.STATE_DIR, FAILURES_DIR), ".txt")
    return storage.read_text(paths[0]) if paths else None


def parse_args(argv: list[str] | None) -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(
        prog="python -m pipeline prepare",
        description="Tokenize corpora into ArrayRecord shards with a resumable manifest. "
        "Unknown options go to Beam (e.g. --runner=DataflowRunner --project ... --temp_location gs://...).",
    )
    defaults = PrepareConfig()
    parser.add_argument("--input", action="append", required=True, help="file, glob, directory or hub id; repeatable")
    parser.add_argument("--output", required=True, help="output directory (local or any Beam filesystem)")
    parser.add_argument("--format", choices=INPUT_FORMATS, default=None, help="default: from the file name")
    parser.add_argument("--tokenizer", default=defaults.tokenizer, help="tiktoken name or .tiktoken path")
    parser.add_argument("--text-field", default=defaults.text_field)
    parser.add_argument("--separator", default=defaults.separator, help="document separator line (text format)")
    parser.add_argument("--validation-fraction", type=float, default=defaults.validation_fraction)
    parser.add_argument("--seed", type=int, default=defaults.seed, help="salts the split hash and unit shuffles")
    parser.add_argument("--unit-bytes", type=int, default=defaults.unit_bytes, help="target input bytes per unit")
    parser.add_argument("--record-tokens", type=int, default=defaults.record_tokens)
    parser.add_argument("--hf-split", default=defaults.hf_split)
    parser.add_argument("--hf-name", default=defaults.hf_name, help="Hugging Face dataset config name")
    parser.add_argument("--skip-bad-files", action="store_true", help="record unreadable inputs as skipped")
    parser.add_argument("--overwrite", action="store_true", help="replace what prepare wrote in --output")
    return parser.parse_known_args(argv)


def run(argv: list[str] | None = None) -> Manifest:
    """Plan, run the unfinished units, write the manifest. Raises PrepareError on expected failures."""
    args, pipeline_args = parse_args(argv)
    started = time.time()
    try:
        config = PrepareConfig(
            tokenizer=args.tokenizer,
            format=args.format,
            text_field=args.text_field,
            separator=args.separator,
            validation_fraction=args.validation_fraction,
            seed=args.seed,
            unit_bytes=args.unit_bytes,
            record_tokens=args.record_tokens,
            skip_bad_files=args.skip_bad_files,
            hf_split=args.hf_split,
            hf_name=args.hf_name,
        )
        output_dir = args.output if not storage.is_local(args.output) else os.path.abspath(args.output)
        plan = make_plan(args.input, config)
        state = prepare_output_dir(output_dir, plan, overwrite=args.overwrite)
    except (ValueError, SourceError, RuntimeError) as e:
        raise PrepareError(str(e)) from None
    if state == "complete":
        print(f"{output_dir} is already complete for these inputs and config; nothing to do", file=sys.stderr)
        return Manifest.from_json(storage.read_text(storage.join(output_dir, formats.MANIFEST_NAME)))

    storage.delete_tree(storage.join(output_dir, formats.STATE_DIR, FAILURES_DIR))
    done = {i: r for i, r in finished_units(output_dir).items() if is_complete(r, output_dir)}
    pending = [u for u in plan.units if u.index not in done]
    print(
        f"prepare: {len(plan.inputs)} inputs, {len(plan.units)} units "
        f"({len(done)} already done), tokenizer {plan.tokenizer.name}, dtype {plan.dtype}",
        file=sys.stderr,
    )

    seen: dict[int, UnitResult] = {}

    def poll() -> tuple[int, int]:
        seen.update(finished_units(output_dir, seen))
        return len(seen), sum(r.tokens for r in seen.values())

    options = default_runner_options(pipeline_args)
    tokenize_started = time.time()
    if pending:
        with PollingProgress(
            poll,
            len(plan.units),
            already_done=len(done),
            already_tokens=sum(r.tokens for r in done.values()),
            interval=1.0 if storage.is_local(output_dir) else 10.0,
        ):
            try:
                run_units(plan, pending, output_dir, options)
            except Exception as e:
                message = _failure_message(output_dir)
                if message is None:
                    raise
                raise PrepareError(message) from e
    run_info = {
        "started_unix": started,
        "finished_unix": time.time(),
        "seconds": time.time() - started,
        "tokenize_seconds": time.time() - tokenize_started,
        "units_run": len(pending),
        "units_resumed": len(done),
        "runner": options.view_as(StandardOptions).runner or "DirectRunner",
        "pipeline_args": pipeline_args,
        "host": platform.node(),
    }
    manifest = write_outputs(output_dir, plan, run_info)
    print(summary(manifest, output_dir, time.time() - started), file=sys.stderr)
    return manifest


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
    return "\n".join(lines)


