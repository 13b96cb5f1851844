"""Which prepared directories to train on, in which token shares: the data spec.

One string, in one of three forms:

    data/stories                                  one prepared directory, a source named "stories"
    web=0.8:data/web,stories=0.2:gs://b/stories   NAME=WEIGHT:PATH entries, comma-separated
    mix.json                                      {"web": {"path": "data/web", "weight": 0.8}, ...}

A JSON entry may add "stages": {"STEP": WEIGHT, ...}: from training step STEP on, the source's
weight is WEIGHT (until its next stage); every stage's weights are normalized on their own, so
`{"web": {..., "weight": 0.8, "stages": {"1000": 0.5}}, "stories": {..., "weight": 0.2}}` trains on
80% web tokens for 1000 steps, then on 0.5 / 0.7 of them.

A weight is the share of training tokens the source should supply (not of records or documents);
weights are normalized, so `web=4:...,stories=1:...` is the same mixture as 0.8 and 0.2. A PATH
is everything after the first ':' following the weight, so `gs://` paths need no quoting. Relative
paths in a JSON file are relative to the file's own directory, so the file can travel with the
data; on the command line they are relative to the working directory. Names label per-source
counts and logs: letters, digits, '_', '.' and '-'.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
from collections.abc import Iterable

from etils import epath

from pipeline.load.errors import LoaderError

_NAME_CHARACTERS = "A-Za-z0-9_.-"
_NAME = re.compile(f"[{_NAME_CHARACTERS}]+")
_UNUSABLE = re.compile(f"[^{_NAME_CHARACTERS}]")
_FORMS = "a prepared directory, NAME=WEIGHT:PATH[,NAME=WEIGHT:PATH...], or a .json file"


@dataclasses.dataclass(frozen=True)
class DataSource:
    """One prepared directory of a mixture, and its share of the training tokens."""

    name: str
    path: str
    weight: float = 1.0
    stages: tuple[tuple[int, float], ...] = ()  # (first step, weight) of each later stage, in order

    def __post_init__(self) -> None:
        if not _NAME.fullmatch(self.name):
            raise LoaderError(
                f"source name {self.name!r} is not usable; use letters, digits, '_', '.' and '-' "
                "(name the source explicitly: NAME=WEIGHT:PATH)"
            )
        if not self.path:
            raise LoaderError(f"source {self.name!r} has an empty path")
        for weight in (self.weight, *(w for _, w in self.stages)):
            if isinstance(weight, bool) or not isinstance(weight, (int, float)):
                raise LoaderError(
                    f"weight of source {self.name!r} must be a number (got {weight!r})"
                )
            if not (math.isfinite(weight) and weight > 0):
                raise LoaderError(
                    f"weight of source {self.name!r} must be a positive number (got {weight!r})"
                )
        steps = [step for step, _ in self.stages]
        if steps != sorted(set(steps)) or any(not isinstance(s, int) or s < 1 for s in steps):
            raise LoaderError(
                f"stages of source {self.name!r} must start at distinct positive steps, in order "
                f"(got {steps})"
            )

    def weight_at(self, step: int) -> float:
        """The weight in force at training step `step`."""
        return ([self.weight] + [w for start, w in self.stages if start <= step])[-1]

    @classmethod
    def directory(cls, path: str) -> DataSource:
        """A lone directory: a source named after its last path component, weight 1."""
        name = _UNUSABLE.sub("_", os.path.basename(path.rstrip("/"))) or "data"
        return cls(name=name, path=path)


def check_names(sources: Iterable[DataSource]) -> None:
    """Refuses a mixture without sources or with two sources of one name."""
    names = [s.name for s in sources]
    if not names:
        raise LoaderError(f"a mixture needs at least one source; give {_FORMS}")
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise LoaderError(
            f"the data spec names {', '.join(map(repr, repeated))} more than once; give each "
            "source its own name"
        )


def parse_data_spec(text: str) -> tuple[DataSource, ...]:
    """The sources a data spec names, in its order, with weights summing to 1 (unless staged)."""
    text = text.strip()
    if not text:
        raise LoaderError(f"empty data spec; give {_FORMS}")
    if text.endswith(".json"):
        sources = _json_sources(text)
    elif "=" in text:
        sources = [_entry(part) for part in text.split(",")]
    else:
        return (DataSource.directory(text),)
    check_names(sources)
    if any(s.stages for s in sources):
        return tuple(
            sources
        )  # every stage is normalized where it is used (`host_rows.mixture_stages`)
    total = sum(s.weight for s in sources)
    return tuple(dataclasses.replace(s, weight=s.weight / total) for s in sources)


def _entry(part: str) -> DataSource:
    name, equals, rest = part.strip().partition("=")
    weight, colon, path = rest.partition(":")
    if not (equals and colon and name.strip() and path.strip()):
        raise LoaderError(
            f"bad data spec entry {part!r}: expected NAME=WEIGHT:PATH, e.g. web=0.8:data/web"
        )
    try:
        value = float(weight)
    except ValueError:
        raise LoaderError(f"weight {weight!r} of source {name.strip()!r} is not a number") from None
    return DataSource(name=name.strip(), path=path.strip(), weight=value)


def _json_sources(spec_path: str) -> list[DataSource]:
    path = epath.Path(spec_path)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise LoaderError(f"data spec file {spec_path} does not exist") from None
    except json.JSONDecodeError as e:
        raise LoaderError(f"data spec file {spec_path} is not valid JSON: {e}") from None
    entry_form = '{"path": "...", "weight": 0.8}'
    if not isinstance(data, dict) or not data:
        raise LoaderError(
            f"data spec file {spec_path} must hold a non-empty JSON object "
            f'{{"NAME": {entry_form}, ...}}'
        )
    sources = []
    for name, entry in data.items():
        keys = set(entry) if isinstance(entry, dict) else set()
        if not {"path", "weight"} <= keys <= {"path", "weight", "stages"} or not isinstance(
            entry["path"], str
        ):
            raise LoaderError(f"{spec_path}: source {name!r} must be {entry_form} (got {entry!r})")
        stages = entry.get("stages", {})
        if not isinstance(stages, dict) or not all(k.isdigit() for k in stages):
            raise LoaderError(
                f"{spec_path}: stages of source {name!r} must be "
                f'{{"STEP": WEIGHT, ...}} (got {stages!r})'
            )
        relative = entry["path"]
        located = (
            relative
            if "://" in relative or os.path.isabs(relative)
            else str(path.parent / relative)
        )
        staged = tuple(sorted((int(step), weight) for step, weight in stages.items()))
        sources.append(DataSource(name=name, path=located, weight=entry["weight"], stages=staged))
    return sources
