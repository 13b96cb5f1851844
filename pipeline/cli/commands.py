"""The `tokshards` command: one entry to every subcommand, each a module with `parser` and `main`.

`python -m pipeline` and `python -m train` run the same commands through `run_command`. A command's
module is imported only when it runs, so `tokshards prepare` needs only the base install and the
train commands load JAX only for themselves.

An expected failure is a `UserError` (schemas/errors.py), caught here alone: one line, `NAME:
error: MESSAGE`, and its status, 2 for a usage error and 1 for a run that failed; a setting's error
names the setting by the flag the command takes it from. A stop that is no failure (a training run
preempted by SIGTERM, 143) says so in its own line, without `error:`. Ctrl-C ends a command with
130, and is held back while extension modules load (`interrupts.deferred`). Any other exception is
a bug, and keeps its traceback.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import logging
import os
import sys
from collections.abc import Callable
from importlib import metadata

from pipeline.cli import interrupts
from pipeline.cli.arguments import CommandParser, FlagError
from schemas.errors import INTERRUPTED_STATUS, SettingError, UserError


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Every option shows its default. An option whose default is None says in its own help what
    leaving it out does ("default: from the file name"), which "(default: None)" would not."""

    def _get_help_string(self, action: argparse.Action) -> str:
        if action.default is None:
            return action.help or ""
        return super()._get_help_string(action)


@dataclasses.dataclass(frozen=True)
class Command:
    """A subcommand: its one-line summary, the module whose `parser(prog)` and `main(argv, prog)`
    (or the functions named here) define it, and the setup.py extra it needs beyond the base
    install."""

    summary: str
    module: str
    main: str = "main"
    parser: str = "parser"
    extra: str | None = None

    def function(self, name: str) -> Callable:
        return getattr(importlib.import_module(self.module), name)


COMMANDS = {
    "prepare": Command(
        "tokenize corpora into ArrayRecord shards, resumably", "pipeline.prepare.command_line"
    ),
    "verify": Command(
        "check every file of a prepared directory as its readers do",
        "pipeline.dataset.verify",
    ),
    "inspect": Command(
        "totals, lengths and first documents of a prepared directory", "pipeline.dataset.inspect"
    ),
    "export": Command(
        "token files for Megatron-LM, nanoGPT, llm.c or datatrove",
        "pipeline.export.command",
    ),
    "batches": Command(
        "write the batches one host would train on to an .npz",
        "pipeline.load.batches",
        extra="load",
    ),
    "corpus": Command("write the embedded TinyStories-style demo corpus", "pipeline.corpus"),
    "train": Command(
        "train a GPT on prepared data, or resume a workdir's run", "train.cli", extra="train"
    ),
    "sample": Command(
        "continue a prompt from a run's latest checkpoint",
        "train.cli",
        main="sample_main",
        parser="sample_parser",
        extra="train",
    ),
}
# Commands that import Beam as they load (`prepare` loads it itself, once its settings stand).
_BEAM = ("verify", "inspect", "export")
_OWN_PACKAGES = ("pipeline", "train", "model", "schemas")


def parser(prog: str = "tokshards") -> argparse.ArgumentParser:
    """The top-level parser, for its help and errors; a command's own arguments go to its own
    parser."""
    p = CommandParser(
        prog=prog,
        description="Streaming tokenization to deterministic ArrayRecord shards, a Grain loader "
        f"and a Flax NNX GPT trainer. `{prog} COMMAND --help` describes a command.",
    )
    p.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    commands = p.add_subparsers(title="commands", metavar="COMMAND", dest="command", required=True)
    for name, command in COMMANDS.items():
        commands.add_parser(name, help=command.summary, add_help=False)
    return p


def _version() -> str:
    try:
        return metadata.version("tokshards")
    except metadata.PackageNotFoundError:  # a checkout on sys.path, not installed
        return "(not installed)"


def main(argv: list[str] | None = None, prog: str = "tokshards") -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in COMMANDS:
        try:
            parser(prog).parse_args(argv)  # prints the help or the version, and exits
        except FlagError as e:
            print(f"{prog}: error: {e}", file=sys.stderr)
            return e.exit_status
    return run_command(argv[0], argv[1:], f"{prog} {argv[0]}")


def run_command(name: str, argv: list[str], prog: str) -> int:
    """Runs one command: its status, or an expected failure's in one line; a Ctrl-C at any moment
    ends it with one line and status 130."""
    interrupts.install()
    try:
        with interrupts.deferred():
            if name in _BEAM:
                import_beam_quietly()
            command = COMMANDS[name].function(COMMANDS[name].main)
        status = command(argv, prog)
        interrupts.settle()
    except UserError as e:
        interrupts.settle()
        if (
            interrupts.received()
        ):  # the failure of an interrupted run: the interrupt is what happened
            return _interrupted(name)
        _tell(name, prog, e)
        return e.exit_status
    except ModuleNotFoundError as e:
        extra = COMMANDS[name].extra
        if extra is None or (e.name or "").partition(".")[0] in _OWN_PACKAGES:
            raise
        print(
            f"{name}: error: {e.name} is not installed; this command needs the {extra!r} extra: "
            f"pip install 'tokshards[{extra}]'",
            file=sys.stderr,
        )
        return 1
    except KeyboardInterrupt:
        interrupts.settle()
        return _interrupted(name)
    # An interrupt that a finalizer swallowed still ends the run as interrupted.
    return _interrupted(name) if interrupts.received() else status


def _tell(name: str, prog: str, error: UserError) -> None:
    """`NAME: error: MESSAGE` on one line (`NAME: MESSAGE` for a stop that is no failure), after the
    error's details where it carries them."""
    if error.details:
        print(error.details, file=sys.stderr)
    message = str(error)
    if isinstance(error, SettingError):
        command = COMMANDS[name]
        message = error.told(flags_of(command.function(command.parser)(prog)))
    print(f"{name}: {'error: ' if error.failure else ''}{message}", file=sys.stderr)


def flags_of(parser: argparse.ArgumentParser) -> dict[str, str]:
    """Each option's setting (its destination) -> its long flag; a switch's positive form."""
    return {
        action.dest: max(
            action.option_strings[:1]
            if isinstance(action, argparse.BooleanOptionalAction)
            else action.option_strings,
            key=len,
        )
        for action in parser._actions
        if action.option_strings and action.dest != "help"
    }


def import_beam_quietly() -> None:
    """Without Beam's gcp extra, importing Beam warns on the root logger that BigQuery's clients are
    missing; no command here uses them, so the warning is held back for the import alone."""
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)
    try:
        import apache_beam  # noqa: F401
    finally:
        root.setLevel(level)


def _interrupted(name: str) -> int:
    start = "\n" if sys.stderr.isatty() else ""  # after the progress line
    if name == "prepare":
        # The job and its workers are stopped on the way out; what they finished stays.
        print(
            f"{start}prepare: interrupted; the units done are kept, and a rerun resumes",
            file=sys.stderr,
        )
    else:
        print(f"{start}{name}: interrupted", file=sys.stderr)
    return INTERRUPTED_STATUS


def exit_now(status: int) -> None:
    """Ends the process. Without JAX loaded, it skips the interpreter's teardown of Beam's and its
    clients' modules (half a second that does nothing: every file is written and closed before a
    command returns); with JAX, the teardown runs its exit handlers, which leave a multi-host
    run."""
    if "jax" in sys.modules:
        sys.exit(status)
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


def run() -> None:
    """The `tokshards` console script."""
    exit_now(main())
