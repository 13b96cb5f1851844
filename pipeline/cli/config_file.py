"""`--config FILE`: a command's flags read from a TOML file, the command line overriding them.

A key is a flag's name, with dashes or underscores (`--unit-bytes` is `unit-bytes` or
`unit_bytes`, `--layers` is `layers`), and takes what the flag takes: the same text or a TOML
number, `true`/`false` for a switch (and for a flag that may be given alone, `--remat`: `true` is
the flag alone, `false` its default), a list for a repeatable flag. The file's values go through the
flag's own parsing (types, choices), so a run from a file and a run from the same flags resolve to
the same settings, and save the same config.

TOML, read by the standard library's `tomllib`: nothing to install on any machine, and its values
are typed as written; YAML 1.1 (PyYAML) reads `1e-3` as a string and `no` or `off` as false.
"""

from __future__ import annotations

import argparse
import tomllib
from collections.abc import Callable
from typing import Any

from pipeline.cli.arguments import CommandParser
from schemas.errors import UsageError, closest
from schemas.settings import setting

# The option's destination; no key of a file.
CONFIG = "config"


class ConfigFileError(UsageError, ValueError):
    """A config file that cannot be read, or a key or value of it that its command refuses."""


def option(example: str) -> Any:
    """The `--config` option of a command's launch options; `example` is a line of such a file."""
    return setting(
        None,
        "read the settings from a TOML file: keys are the flags' names, with dashes or "
        f"underscores ({example}); flags given here override it",
        metavar="FILE.toml",
        unset="none",
        launch="names where the settings were read; what it gives is saved as the flags would save "
        "it",
    )


def parse(
    make_parser: Callable[[], CommandParser], argv: list[str], known: bool = False
) -> tuple[argparse.Namespace, list[str]]:
    """`argv` parsed by `make_parser()`, over the values of the file its `--config` names: the
    parser's defaults, then the file's, then the command line's. With `known`, the arguments the
    parser does not know are returned (as `parse_known_args` does) instead of refused."""
    parser = make_parser()
    bare = make_parser()
    # --help, and the usage line of an error, show the parser as its command defines it.
    bare.format_help, bare.format_usage = parser.format_help, parser.format_usage
    given, _ = _given(bare, argv, known)
    if CONFIG not in given:
        return parser.parse_known_args(argv) if known else (parser.parse_args(argv), [])
    from_file = read(given[CONFIG], make_parser())
    for action in parser._actions:
        if action.dest in from_file:
            action.default = from_file[action.dest]
            action.required = False
    args, rest = parser.parse_known_args(argv) if known else (parser.parse_args(argv), [])
    # A repeatable flag given here replaces the file's list instead of extending it.
    for dest, value in given.items():
        setattr(args, dest, value)
    return args, rest


def read(path: str, parser: CommandParser) -> dict[str, Any]:
    """The settings of a config file, by destination, each parsed by its flag; keys are the flags'
    names, with dashes or underscores, each setting given once (`unit-bytes` and `unit_bytes` in
    one file would leave the reader to guess which one was meant)."""
    try:
        with open(path, "rb") as f:
            table = tomllib.load(f)
    except OSError as e:
        raise ConfigFileError(f"{path}: cannot read the config file ({e.strerror})") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigFileError(f"{path}: not TOML: {e}") from None
    actions = {
        a.option_strings[0].removeprefix("--"): a
        for a in parser._actions
        if a.option_strings and a.dest not in (CONFIG, "help")
    }
    values: dict[str, Any] = {}
    keys: dict[str, str] = {}  # each flag's name -> the key of the file that gave it
    for key, value in table.items():
        name = key.replace("_", "-")
        if name not in actions:
            near = closest(name, actions)
            spelled = near.replace("-", "_") if near and "_" in key else near  # as the file does
            hint = (
                f" (did you mean {spelled!r}?)"
                if near
                else f"; the keys are: {', '.join(sorted(actions))}"
            )
            raise ConfigFileError(f"{path}: unknown key {key!r}{hint}")
        if name in keys:
            raise ConfigFileError(
                f"{path}: {keys[name]!r} and {key!r} are the same setting; keep one of them"
            )
        keys[name] = key
        try:
            given, _ = _given(parser, _tokens(actions[name], value), known=False, raising=True)
        except (argparse.ArgumentError, TypeError) as e:
            raise ConfigFileError(
                f"{path}: {key} = {value!r}: {getattr(e, 'message', e)}"
            ) from None
        values.update(given)
    return values


def _tokens(action: argparse.Action, value: Any) -> list[str]:
    """The command-line arguments that give `value` to `action`."""
    flag = action.option_strings[0]
    if action.nargs == 0:  # a switch
        if not isinstance(value, bool):
            raise TypeError("expected true or false")
        if isinstance(action, argparse.BooleanOptionalAction):
            return [flag if value else f"--no-{flag.removeprefix('--')}"]
        return [flag] if value == action.const else []
    if isinstance(value, bool) and hasattr(action, "switched"):  # a flag that may be given alone
        return [f"{flag}={action.switched[value]}"]
    items = (
        value if isinstance(action, argparse._AppendAction) and isinstance(value, list) else [value]
    )
    if any(isinstance(v, (bool, list, dict)) for v in items):
        raise TypeError("expected a string or a number")
    return [f"{flag}={v}" for v in items]


def _given(
    parser: CommandParser, argv: list[str], known: bool, raising: bool = False
) -> tuple[dict[str, Any], list[str]]:
    """Only the settings that `argv` itself gives: no defaults, nothing required. `raising` leaves a
    bad value an ArgumentError, for the caller to say where it came from, instead of the parser's
    own error."""
    for action in parser._actions:
        action.default = argparse.SUPPRESS
        action.required = False
    parser.exit_on_error = not raising
    args, rest = parser.parse_known_args(argv)
    if rest and not known:
        parser.error(parser.unknown(rest))
    return vars(args), rest
