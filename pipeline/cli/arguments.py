"""A command's options, derived from its declared settings (schemas/settings.py).

Each declared field becomes one argparse option, its destination the field's name: the declared
flag (else the name with dashes), the help with what leaving it out does, the value read by the
command's reader for it, the declared `parse` or the field's type; a bool is a switch with a `--no-`
form (to turn off what a config file turned on), a `repeat` setting a flag given once per value, a
`bare` one a flag that may also be given alone (and, in a config file, `true` or `false`: the flag
alone, or the default). With `resume`, every option defaults to None, so
that a command tells the settings given (on the command line or in --config) from those left out,
and the help says the default a new run takes.
"""

from __future__ import annotations

import argparse
import re
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NoReturn

from schemas import settings
from schemas.errors import UsageError, closest


class FlagError(UsageError, ValueError):
    """A command line its command cannot read: an unknown flag, a value of the wrong type, a choice
    it does not offer, a missing flag."""


class CommandParser(argparse.ArgumentParser):
    """Every command's parser: its errors are `FlagError`s, told in one line by the command runner
    like every other error (`train: error: ...`, status 2), not argparse's usage block and
    `tokshards train: error:`; an unknown flag and a choice not offered name the nearest one; and a
    negative number after a flag is its value (`--learning-rate -1e-3`, then refused for its range),
    not a flag."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        # argparse reads `-1` and `-.5` as numbers but `-1e-3` as an option.
        self._negative_number_matcher = re.compile(r"^-(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$")

    def error(self, message: str) -> NoReturn:
        raise FlagError(message)

    def parse_args(self, args: Sequence[str] | None = None, namespace: Any = None) -> Any:
        parsed, rest = self.parse_known_args(args, namespace)
        if rest:
            raise FlagError(self.unknown(rest))
        return parsed

    def unknown(self, rest: Sequence[str]) -> str:
        """What the arguments a command does not take are: the first unknown flag, with the nearest
        one it has, or the stray values."""
        flags = [a.split("=", 1)[0] for a in rest if a.startswith("-")]
        if not flags:
            return f"unexpected argument {rest[0]!r}"
        known = [s for action in self._actions for s in action.option_strings]
        near = closest(flags[0], known)
        return f"unknown flag {flags[0]}" + (f" (did you mean {near}?)" if near else "")

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        if action.choices is not None and value not in action.choices:
            offered = ", ".join(map(repr, action.choices))
            near = closest(value, action.choices) if isinstance(value, str) else None
            hint = f"; did you mean {near!r}?" if near else ""
            raise argparse.ArgumentError(
                action, f"invalid choice: {value!r} (choose from {offered}){hint}"
            )


def count_from(least: int) -> Callable[[str], int]:
    """An option's reader for a count, refusing what it cannot mean (`--documents -1`) with the
    range that can, as declared settings are."""

    def read(text: str) -> int:
        value = int(text)
        if value < least:
            raise argparse.ArgumentTypeError(f"must be at least {least}, got {value}")
        return value

    read.__name__ = "int"  # argparse names the reader in "invalid int value: 'x'"
    return read


def add_settings(
    parser: argparse.ArgumentParser,
    cls: type,
    *,
    title: str | None = None,
    readers: Mapping[str, Callable[[str], Any]] | None = None,
    resume: bool = False,
) -> None:
    """Adds an option for each setting `cls` declares, in a group titled `title` if given.
    `readers`: by setting, how the command reads a flag's text where that needs the command's own
    code (a path through Beam's filesystems)."""
    group = parser.add_argument_group(title) if title else parser
    annotations = settings.types(cls)
    for field, declared in settings.declared(cls):
        flag, default = settings.flag_of(field, declared), settings.default_of(field)
        options: dict[str, Any] = {
            "dest": field.name,
            "help": _help(declared, default, resume),
            "required": declared.required,
            "default": None if resume or declared.required else [] if declared.repeat else default,
        }
        base, _ = settings.optional(annotations[field.name])
        if base is bool:
            options["action"] = argparse.BooleanOptionalAction
        else:
            options["type"] = (
                (readers or {}).get(field.name)
                or declared.parse
                or _reader(field.name, base, declared)
            )
            if declared.repeat:
                options["action"] = "append"
            if declared.bare is not None:
                options.update(nargs="?", const=declared.bare)
            if declared.choices is not None and typing.get_origin(base) is None:
                options["choices"] = declared.choices  # shown as the metavar
            else:
                options["metavar"] = declared.metavar or flag.removeprefix("--").upper().replace(
                    "-", "_"
                )
        action = group.add_argument(flag, **options)
        if declared.bare is not None:
            # A config file's `true` is the flag alone, its `false` the default (config_file.py).
            action.switched = (default, declared.bare)


def _help(declared: settings.Setting, default: Any, resume: bool) -> str:
    """The declared help and, where argparse would not show it (None), what leaving the option out
    does."""
    if declared.unset is not None:
        return f"{declared.help} (default: {declared.unset.format(default=default)})"
    if resume and not declared.required:
        shown = ("on" if default else "off") if isinstance(default, bool) else default
        return f"{declared.help} (default: {shown})"
    return declared.help


def _reader(name: str, annotation: Any, declared: settings.Setting) -> Callable[[str], Any]:
    base = (
        typing.get_args(annotation)[0]
        if declared.repeat and typing.get_origin(annotation) is list
        else annotation
    )
    if base in (int, float, str):
        return base
    raise TypeError(
        f"setting {name!r} of type {annotation} needs a declared parse= or a reader for its flag's "
        "text"
    )
