"""Settings declared once, as dataclass fields: type, default, help, flag, limits.

    unit_bytes: int = setting(DEFAULT_UNIT_BYTES, "target input bytes per unit", minimum=4096)

From the declarations derive the command line (`pipeline/cli/arguments.py` builds the argparse
options: the flag is the field's name with dashes unless declared, its type the field's), the
config-file keys (the flags' names), the checks a settings class runs in `__post_init__`
(`check`: choices and limits, raising `SettingError`), the JSON Schema of the saved form
(`json_schema`: types, enums, limits, and the keys every readable version holds), and the flag an
error names (`flags`). A flag whose value is not saved under its own name declares where it lands
(`saved_as`); one that is not saved at all, a launch option, declares why (`launch`). A setting
added later declares the manifest version that added it (`since`), and, where a saved config
without it was made otherwise than its default would make it, the value that stands for it there
(`older`): reading a saved config (`from_saved`) and comparing runs (`identity`) both use it.

A small generator over the standard library's argparse, rather than a library, because the commands
need what none of those weighed gives together: options a command does not know passed on to
Beam (`parse_known_args`) and one known to neither refused with the nearest name; TOML config
files keyed by the flags' names, below the command line, with `--no-` switches over them; flags
that default to None so that a resumed training run tells given settings from left-out ones;
errors on one line that name the flag; and nothing heavy imported (prepare never imports JAX,
`tokshards --help` imports no command). tyro and simple-parsing derive argparse-like parsers from
dataclasses, but take config files in YAML or not at all, print their own multi-line errors (tyro
with rich), and add dependencies to every worker that imports `schemas`; draccus (levanter's)
names flags by dotted field paths with underscores and reads YAML; jsonargparse reads YAML and
brings its own option resolution; pydantic-settings validates through pydantic, a heavy import on
every launcher and worker, with errors of several lines. TOML through `tomllib` and argparse need
nothing installed.

Standard library only: both sides of the data path import it.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import typing
from collections.abc import Callable, Mapping
from typing import Any

from schemas.errors import SettingError, closest

_KEY = "tokshards.setting"
_NONE = object()  # no `older` value declared


@dataclasses.dataclass(frozen=True)
class Setting:
    """What a field declares beyond its type and default.

    `flag`: its option (default: `--` and the field's name with dashes). `parse`: reads the flag's
    text (default: the field's type); `repeat`: the flag is given once per value, collected in a
    list. `unset`: what leaving it out does, where the default alone does not say (shown in
    --help; `{default}` stands for the default). `choices`, `minimum` (inclusive), `above`
    (exclusive minimum) and `below` (exclusive maximum) bound the value, or each item or key of a
    collection; a float must be finite. `bare`: the value of the flag given alone, without one
    (`--remat` is `--remat full`; `remat = true` in a config file). `since`: the manifest
    version that added it, so older manifests may lack it. `saved_as`: where the value lands in the
    saved config when not under its own name (`model.num_layers`). `launch`: why a launch option is
    not part of the saved config. `older`: the value a saved config that lacks the setting (saved
    before `since`) was made with, where that is not the default. `matters`: whether the setting
    decides anything in a given config (declared with `older`): a run's `identity` leaves such a
    setting out where it does not matter or holds its `older` value, so that the identity recorded
    by a run from before the setting existed still matches.
    """

    help: str
    flag: str | None = None
    metavar: str | None = None
    parse: Callable[[str], Any] | None = None
    repeat: bool = False
    required: bool = False
    unset: str | None = None
    choices: tuple | None = None
    minimum: int | float | None = None
    above: int | float | None = None
    below: int | float | None = None
    bare: Any = None
    since: int | None = None
    saved_as: str | None = None
    launch: str | None = None
    older: Any = dataclasses.field(default=_NONE, compare=False)
    matters: Callable[[Any], bool] | None = dataclasses.field(default=None, compare=False)

    @property
    def has_older(self) -> bool:
        return self.older is not _NONE


def setting(
    default: Any = dataclasses.MISSING,
    help: str = "",
    *,
    default_factory: Any = dataclasses.MISSING,
    **declared: Any,
) -> Any:
    """A dataclass field declaring a setting (see `Setting` for the keywords)."""
    if not help:
        raise ValueError("a setting needs its help")
    if "older" in declared and declared.get("since") is None:
        raise ValueError("a setting with an older value declares the version it came with (since)")
    return dataclasses.field(
        default=default, default_factory=default_factory, metadata={_KEY: Setting(help, **declared)}
    )


def declared(cls: type) -> list[tuple[dataclasses.Field, Setting]]:
    """The fields of dataclass `cls` that declare a setting, in order."""
    return [(f, f.metadata[_KEY]) for f in dataclasses.fields(cls) if _KEY in f.metadata]


def flag_of(field: dataclasses.Field, declaration: Setting) -> str:
    return declaration.flag or "--" + field.name.replace("_", "-")


def flags(*classes: type) -> dict[str, str]:
    """Setting name -> its flag, for the settings of `classes`."""
    return {field.name: flag_of(field, s) for cls in classes for field, s in declared(cls)}


def default_of(field: dataclasses.Field) -> Any:
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return None if field.default is dataclasses.MISSING else field.default


def types(cls: type) -> dict[str, Any]:
    """Each field's type, its annotation evaluated (`str | None`, `list[str]`)."""
    return typing.get_type_hints(cls)


def optional(annotation: Any) -> tuple[Any, bool]:
    """`X | None` -> (X, True); anything else -> (it, False)."""
    args = typing.get_args(annotation)
    if type(None) in args and len(args) == 2:
        return next(a for a in args if a is not type(None)), True
    return annotation, False


def from_saved(cls: type, saved: Mapping[str, Any]) -> Any:
    """`cls` from its saved form (`dataclasses.asdict`): a setting the form lacks takes its `older`
    value where it declares one, else its default."""
    values = dict(saved)
    for field, s in declared(cls):
        if field.name not in values and s.has_older:
            values[field.name] = s.older
    return cls(**values)


def identity(instance: Any) -> dict[str, Any]:
    """What makes two runs' settings the same: the saved form, less each setting declared with an
    `older` value that holds it or does not matter here, as a form saved before it existed."""
    values = dataclasses.asdict(instance)
    for field, s in declared(type(instance)):
        if s.has_older and (
            values[field.name] == s.older or (s.matters is not None and not s.matters(instance))
        ):
            del values[field.name]
    return values


def check(instance: Any) -> None:
    """Refuses a value outside what its setting declares: the first check of a settings class's
    `__post_init__`. None passes (a setting left to its rule)."""
    check_values(type(instance), vars(instance))


def check_values(cls: type, values: Mapping[str, Any]) -> None:
    """`check` of the settings of `cls` that `values` holds (by name), before an instance can be
    made: a command refuses a given value so before it loads what the run needs."""
    for field, s in declared(cls):
        value = values.get(field.name)
        if value is None:
            continue
        if isinstance(value, Mapping):
            items, said = list(value), "have keys among"
        elif isinstance(value, (list, tuple)):
            items, said = list(value), "each be one of"
        else:
            items, said = [value], "be one of"
        wrong = [item for item in items if s.choices is not None and item not in s.choices]
        if wrong:
            near = closest(wrong[0], s.choices) if isinstance(wrong[0], str) else None
            hint = f" ({wrong[0]!r}: did you mean {near!r}?)" if near else ""
            raise SettingError(field.name, value, f"must {said} {s.choices}{hint}")
        if isinstance(value, float) and not math.isfinite(value):
            raise SettingError(field.name, value, "must be finite")
        if not isinstance(value, (list, tuple, Mapping)) and not _within(value, s):
            raise SettingError(field.name, value, f"must be {_bounds(s)}")


def _within(value: Any, s: Setting) -> bool:
    return (
        (s.minimum is None or value >= s.minimum)
        and (s.above is None or value > s.above)
        and (s.below is None or value < s.below)
    )


def _bounds(s: Setting) -> str:
    below = _shown(s.below)
    if s.below is None:
        if s.above is None:
            return f"at least {s.minimum}"
        return "positive" if s.above == 0 else f"above {s.above}"
    if s.minimum is None and s.above is None:
        return f"below {below}"
    return f"in [{s.minimum}, {below})" if s.above is None else f"in ({s.above}, {below})"


def _shown(limit: int | float | None) -> str:
    """A limit as a reader takes it in: a large power of two as one (`2**63`)."""
    if isinstance(limit, int) and limit > 2**32 and limit & (limit - 1) == 0:
        return f"2**{limit.bit_length() - 1}"
    return str(limit)


def json_schema(cls: type, *, oldest_version: int) -> dict[str, Any]:
    """The JSON Schema of `cls`'s JSON form (`dataclasses.asdict`), from its declared settings: each
    key's type from its annotation, its choices and limits. Required: the keys of every readable
    version, those declared `since` a version after `oldest_version` taking their defaults when a
    manifest lacks them."""
    annotations = types(cls)
    fields = declared(cls)
    return {
        "type": "object",
        "properties": {field.name: _schema(annotations[field.name], s) for field, s in fields},
        "required": [
            field.name for field, s in fields if s.since is None or s.since <= oldest_version
        ],
        "additionalProperties": False,
    }


_JSON_TYPES = {bool: "boolean", int: "integer", float: "number", str: "string"}


def _schema(annotation: Any, s: Setting) -> dict[str, Any]:
    base, nullable = optional(annotation)
    origin = typing.get_origin(base)
    if origin is list:
        return {"type": "array", "items": _schema(typing.get_args(base)[0], s)}
    if origin is dict:
        value = typing.get_args(base)[1]
        schema: dict[str, Any] = {"type": "object"}
        if s.choices is not None:
            schema["propertyNames"] = {"enum": list(s.choices)}
        if value is not Any:
            schema["additionalProperties"] = _schema(value, dataclasses.replace(s, choices=None))
        return schema
    if base is Any:
        return {}
    if base not in _JSON_TYPES:
        raise TypeError(
            f"no JSON Schema for {annotation}; declare the setting's type as bool, int, float, "
            "str, a list or a dict of them"
        )
    if s.choices is not None:
        return {"enum": [*s.choices, *[None] * nullable]}
    kind = _JSON_TYPES[base]
    schema = {"type": [kind, "null"] if nullable else kind}
    if s.minimum is not None:
        schema["minimum"] = s.minimum
    if s.above is not None:
        schema["exclusiveMinimum"] = s.above
    if s.below is not None:
        schema["exclusiveMaximum"] = s.below
    return schema


def comma_list(text: str) -> list[str]:
    """`a,b,c` -> ['a', 'b', 'c'], empty items dropped: a flag that takes a list in one argument. A
    list of nothing (`--filter ''`) is refused: leaving the flag out says that."""
    items = [item for item in text.split(",") if item]
    if not items:
        raise argparse.ArgumentTypeError(
            f"names nothing (got {text!r}); leave the flag out for none"
        )
    return items
