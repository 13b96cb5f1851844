"""The errors a user is shown: one line, and an exit status by kind.

Every expected failure of the project is a `UserError`, so that the command runner
(`pipeline/cli/commands.py`) catches one type, prints `NAME: error: MESSAGE` and exits with the
error's status: 2 for a usage error (flags, settings, a config file: what the command was asked is
not something it can do), 1 for a run that failed (inputs, outputs, damaged data, a failed job). An
interrupt ends a command with 130; a training run stopped by SIGTERM, with 143 and a line of its own
(train/stopping.py). Anything else is a bug, and keeps its traceback.

A project error keeps `ValueError` or `RuntimeError` as a second base where callers catch those.
Standard library only: both sides of the data path import it.
"""

from __future__ import annotations

import difflib
import functools
from collections.abc import Iterable, Mapping
from typing import Any

USAGE_STATUS = 2
RUN_STATUS = 1
INTERRUPTED_STATUS = 130


def closest(word: str, candidates: Iterable[str]) -> str | None:
    """The candidate nearest to a misspelt `word` (a flag, a config key, a choice), for a "did you
    mean" hint; None where none is near. Every typo path of the project asks here, so that each one
    suggests alike."""
    near = difflib.get_close_matches(word, list(candidates), n=1)
    return near[0] if near else None


class UserError(Exception):
    """An expected failure, said in one line. `details` (a worker's traceback, say) is shown before
    it where the user asked for them (prepare's --verbose)."""

    exit_status = RUN_STATUS
    # The runner's line says `error:` before the message; a stop that is no failure (a preemption)
    # says what happened in its message alone: `NAME: MESSAGE`.
    failure = True

    def __init__(self, message: str, details: str = ""):
        super().__init__(message)
        self.details = details


class UsageError(UserError):
    """A command asked for what it cannot do: a bad flag, setting or config file. Nothing has
    run."""

    exit_status = USAGE_STATUS


class RunError(UserError):
    """A run that failed: an input, an output, damaged data, a failed job."""

    exit_status = RUN_STATUS


class SettingError(UsageError, ValueError):
    """A setting whose value cannot work, said as the code names it or as the user typed it.

    `setting` is the setting at fault and `value` its value; `reason` completes the sentence
    ("must be in [0, 1)") and may name other settings whose values take part, given as keyword
    arguments, by `{name}`:
    `SettingError("width", 100, "must be divisible by {num_heads}", num_heads=3)`. `str()` names
    settings as the code does, grain's style
    (`validation_fraction must be in [0, 1) (got validation_fraction=1.5)`); `told(flags)` names
    them by their flags, as the command runner shows it
    (`--validation-fraction must be in [0, 1), got 1.5`).
    """

    def __init__(self, setting: str, value: Any, reason: str, **others: Any):
        self.setting, self.value, self.reason, self.others = setting, value, reason, others
        super().__init__(self.told({}))

    def __reduce__(self):
        # Rebuilt from its parts, as worker processes send errors back pickled.
        return (
            functools.partial(type(self), **self.others),
            (self.setting, self.value, self.reason),
            self.__dict__,
        )

    @property
    def values(self) -> dict[str, Any]:
        """Every setting the error names, with its value; the one at fault first."""
        return {self.setting: self.value, **self.others}

    def told(self, flags: Mapping[str, str]) -> str:
        """The message, naming the settings by their flags (`flags`: setting -> flag) if the one at
        fault has one there, else as the code names them."""
        as_flags = self.setting in flags
        named = {name: flags.get(name, name) if as_flags else name for name in self.values}
        reason = (
            self.reason.format(**{name: named[name] for name in self.others})
            if self.others
            else self.reason
        )
        said = f"{named[self.setting]} {reason}"
        if not as_flags:
            return (
                f"{said} (got "
                + ", ".join(f"{name}={value!r}" for name, value in self.values.items())
                + ")"
            )
        if not self.others:
            return f"{said}, got {self.value!r}"
        return f"{said}, got " + ", ".join(
            f"{named[name]} {value!r}" for name, value in self.values.items()
        )
