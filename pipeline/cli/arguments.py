"""A command's options, derived from its declared settings (schemas/settings.py).

Each declared field becomes one argparse option, its destination the field's name: the declared
flag (else the name with dashes), the help with what leaving it out does, the value read by the
command's reader for it, the declared `parse` or the field's type; a bool is a switch with a `--no-`
form (to turn off what a config file turned on), a `repeat` setting a flag given once per value, a
`bare` one a flag that may also be given alone. With `resume`, every option defaults to None, so
that a command tells the settings given (on the command line or in --config) from those left out,
and the help says the default a new run takes.
"""

from __future__ import annotations

import argparse
import typing
from collections.abc import Callable, Mapping
from typing import Any

from schemas import settings


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
        group.add_argument(flag, **options)


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
