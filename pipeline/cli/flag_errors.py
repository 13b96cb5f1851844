"""Errors of the settings a command checks, told in the flags the user typed.

Settings check themselves in `__post_init__` and say what they got as the code names it (`got
self.validation_fraction=1.5`, grain's style), which reads well to a caller of the library; on the
command line the same message names the flag instead: `--validation-fraction must be in [0, 1), got 1.5`.
"""

from __future__ import annotations

import argparse
import re

_GOT = re.compile(r" \(got (.*)\)$")
_PAIR = re.compile(r"(?:self\.)?(\w+)=(.*?)(?=, (?:self\.)?\w+=|$)")


def flags_of(parser: argparse.ArgumentParser) -> dict[str, str]:
    """Each option's destination -> its long flag (a switch's positive form, not its `--no-`)."""
    return {
        action.dest: max(_positive(action), key=len)
        for action in parser._actions
        if action.option_strings and action.dest != "help"
    }


def _positive(action: argparse.Action) -> list[str]:
    if isinstance(action, argparse.BooleanOptionalAction):
        return action.option_strings[:1]
    return action.option_strings


def flag_message(message: str, flags: dict[str, str]) -> str:
    """`message` with the settings it names (`flags`: setting -> flag) written as their flags (a name
    without an underscore only as the message's first word), and its
    `(got NAME=VALUE)` or `(got VALUE)` as `, got VALUE` (several values each after their flag)."""
    got = _GOT.search(message)
    if got:
        pairs = _PAIR.findall(got.group(1)) if _PAIR.match(got.group(1)) else [("", got.group(1))]
        values = pairs[0][1] if len(pairs) == 1 else ", ".join(f"{name} {value}" for name, value in pairs)
        message = f"{message[: got.start()]}, got {values}"
    if not flags:
        return message
    names = re.compile(r"(?<![\w/.-])(" + "|".join(map(re.escape, sorted(flags, key=len, reverse=True))) + r")\b")

    def flag(match: re.Match) -> str:
        # A plain word (split, seed, format) is a setting only as the message's subject; elsewhere prose.
        name = match.group(1)
        return flags[name] if "_" in name or match.start() == 0 else name

    return names.sub(flag, message)
