"""`tokshards prepare`'s command line: its options, read and checked before Beam loads.

A bad flag or setting is refused here in a fraction of a second; the run itself (`launcher`), with
Beam and the tokenizers, is imported only once the settings stand. Nothing here imports Beam.
"""

from __future__ import annotations

import argparse
import dataclasses

from pipeline.cli import config_file, interrupts
from pipeline.cli.arguments import CommandParser, add_settings
from pipeline.cli.commands import HelpFormatter, import_beam_quietly
from pipeline.prepare.clean.quality.quality_filters import (
    FilterError,
    check_ranges,
    parse_parameter,
)
from pipeline.prepare.execution import early_job
from schemas.prepare_config import PrepareConfig
from schemas.settings import comma_list, setting


@dataclasses.dataclass(frozen=True)
class LaunchOptions:
    """prepare's options that are not part of its config (PrepareConfig): what to read, where to
    write, how to run. Each says where the run records it, or why it does not."""

    config: str | None = config_file.option("unit-bytes = 1048576")
    input: list[str] | None = setting(
        None,
        "file, glob, directory or hub id; repeatable",
        repeat=True,
        required=True,
        launch="the files it names are the manifest's inputs, each with its size and digest",
    )
    output: str | None = setting(
        None,
        "output directory (local or any Beam filesystem)",
        required=True,
        launch="the directory the manifest describes, not part of what it holds",
    )
    hf_revision: str | None = setting(
        None,
        "branch, tag or commit of hub datasets",
        unset="what an unfinished run here pinned, else main",
        launch="resolved to the commit it names when the run starts, recorded in the manifest's "
        "hub_revisions",
    )
    overwrite: bool = setting(
        False,
        "replace what an earlier prepare run wrote in --output",
        launch="how the output directory is taken, not what is written to it",
    )
    filter_dry_run: bool = setting(
        False,
        "run the cleaning stage only and print what each rule removes, with samples; write no "
        "shards",
        launch="a dry run writes no shards and no manifest",
    )
    verbose: bool = setting(
        False, "tracebacks with errors", launch="what an error prints, not what a run writes"
    )


def parser(prog: str = "tokshards prepare") -> CommandParser:
    parser = CommandParser(
        prog=prog,
        description="Tokenize corpora into ArrayRecord shards with a resumable manifest. Other "
        "options go\n"
        "to Beam (e.g. --runner=DataflowRunner --project ... --region ... --temp_location "
        "gs://...).",
        formatter_class=HelpFormatter,
        allow_abbrev=False,
    )
    add_settings(parser, LaunchOptions, title="the run (not part of the manifest's config)")
    add_settings(
        parser,
        PrepareConfig,
        title="settings (the manifest's config)",
        readers={"decontaminate": comma_list, "filter_params": _parameter},
    )
    return parser


def _parameter(value: str) -> tuple[str, str, object]:
    try:
        return parse_parameter(value)
    except FilterError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _filter_params(given: list[tuple[str, str, object]]) -> dict[str, dict[str, object]]:
    """`--filter-param` values by filter, keys sorted: the config is the same however they were
    ordered."""
    params: dict[str, dict[str, object]] = {}
    for name, key, value in given:
        params.setdefault(name, {})[key] = value
    return {name: dict(sorted(values.items())) for name, values in sorted(params.items())}


def read(argv: list[str], prog: str = "tokshards prepare") -> tuple[argparse.Namespace, list[str]]:
    """Our settings (from --config FILE, overridden by flags) and the options that go to Beam."""
    return config_file.parse(lambda: parser(prog), argv, known=True)


def settings(args: argparse.Namespace) -> PrepareConfig:
    """The run's config as given, its declared ranges and the filters' parameters' checked. Paths
    and hub revisions are resolved by the run (`launcher`)."""
    values = {f.name: getattr(args, f.name) for f in dataclasses.fields(PrepareConfig)}
    params = _filter_params(args.filter_params)
    check_ranges(params)
    return PrepareConfig(**{**values, "filter_params": params})


def main(argv: list[str], prog: str = "tokshards prepare") -> int:
    """The command: a bad flag or setting refused before Beam loads, then the run, which reads the
    same arguments again (milliseconds) as `launcher.run(argv)` does when called as a library.
    The local job's process starts meanwhile where the filters are slow to load (`early_job`)."""
    early_job.start(settings(read(argv, prog)[0]))
    try:
        with interrupts.deferred():
            import_beam_quietly()
            from pipeline.prepare import launcher
        return launcher.main(argv, prog)
    finally:
        early_job.stop()
