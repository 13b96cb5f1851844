"""Work units: the fixed list of pieces a run is cut into, and what finishing one records.

The list is a pure function of the inputs and the config, never of the runner or its worker count.
Each unit writes its own shards, so the output is the same however the runner schedules them.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from schemas.manifest import ShardInfo


@dataclasses.dataclass(frozen=True)
class WorkUnit:
    """A slice of one input: bytes `[start, end)` for text and JSONL, row groups for Parquet,
    rows for a Hugging Face dataset, the whole file for compressed JSONL.

    `first_line` is the 1-based line (or 0-based row) number at `start`, for reject locations.
    """

    index: int
    input_index: int
    path: str
    format: str
    start: int
    end: int
    first_line: int = 1

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class UnitResult:
    """Written atomically when a unit's shards are in place: the durable mark that it is done."""

    unit: int
    shards: tuple[ShardInfo, ...]
    skipped: dict[str, int]
    counts: dict[str, int]

    @property
    def tokens(self) -> int:
        return sum(s.tokens for s in self.shards)

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> UnitResult:
        data = json.loads(text)
        return cls(
            unit=data["unit"],
            shards=tuple(ShardInfo(**s) for s in data["shards"]),
            skipped=data["skipped"],
            counts=data["counts"],
        )


def unit_record_name(index: int) -> str:
    return f"{index:05d}.json"
