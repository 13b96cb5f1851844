"""Work units: the fixed list of pieces a run is cut into, and what finishing one records.

The list is a pure function of the inputs' sizes and layout and of the config, never of the runner
or its worker count, and planning it reads no content: each unit writes its own shards, so the
output is the same however the runner schedules them.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from pipeline.dataset import storage
from schemas.errors import RunError
from schemas.manifest import ShardInfo


@dataclasses.dataclass(frozen=True)
class WorkUnit:
    """A slice of one input, with the input's identity as planned.

    `start`/`end` are bytes for text and JSONL (the unit owns the documents or lines that start in
    the range, and reads past `end` to finish the last one), rows for Parquet and Arrow, and the
    whole file for compressed JSONL. `size` and `version` are what the input was planned with; a
    worker that finds anything else refuses to read it.
    """

    index: int
    input_index: int
    path: str
    format: str
    start: int
    end: int
    size: int
    version: str

    @property
    def rows(self) -> bool:
        """Whether `start`/`end` count rows (columnar formats) rather than bytes."""
        return self.format in ("parquet", "arrow")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def input_bytes(units: list[WorkUnit]) -> dict[int, int]:
    """Each unit's share of its input's bytes: its byte range, or for rows (Parquet, Arrow) its
    share of the file's rows times the file's size. What a stage that reads the units reports its
    rate in."""
    rows: dict[int, int] = {}
    for u in units:
        if u.rows:
            rows[u.input_index] = max(rows.get(u.input_index, 0), u.end)
    return {
        u.index: round(u.size * (u.end - u.start) / max(rows[u.input_index], 1))
        if u.rows
        else u.end - u.start
        for u in units
    }


@dataclasses.dataclass(frozen=True)
class UnitResult:
    """Written atomically when a unit's shards are in place: the durable mark that it is done.

    `digest` and `newlines` describe exactly the unit's own range of its input (the manifest's input
    digests and the rejects' absolute line numbers are assembled from them); `package_versions` are
    the worker's.
    """

    unit: int
    plan: str
    shards: tuple[ShardInfo, ...]
    skipped: dict[str, int]
    counts: dict[str, int]
    digest: str
    newlines: int
    package_versions: dict[str, str]
    seconds: float
    peak_rss_bytes: int
    worker: str = ""  # HOST:PID of the process that ran it: how many processes shared the run
    # The tokens written per language, where the language filter judged the documents.
    language_tokens: dict[str, int] = dataclasses.field(default_factory=dict)

    @property
    def tokens(self) -> int:
        return sum(s.tokens for s in self.shards)

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> UnitResult:
        data = json.loads(text)
        return cls(**{**data, "shards": tuple(ShardInfo(**s) for s in data["shards"])})


def unit_record_name(index: int) -> str:
    return f"{index:05d}.json"


def unit_rejects_name(index: int) -> str:
    return f"{index:05d}.jsonl"


class InputChangedError(RunError, RuntimeError):
    """An input is not what the run planned: resuming would mix two versions of it."""

    deterministic = True


def check_unchanged(unit: WorkUnit) -> None:
    info = storage.file_info(unit.path)
    if (info.size, info.version) != (unit.size, unit.version):
        raise InputChangedError(
            f"{unit.path} changed since this run was planned (size {unit.size} -> {info.size}, "
            f"{unit.version} -> {info.version}); pass --overwrite to prepare again from the inputs "
            "as they are now"
        )
