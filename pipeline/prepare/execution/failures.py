"""Failed units, recorded where the launcher finds them whatever the runner.

A unit that fails is recorded in a failures directory instead of raising out of the worker: a
raising DoFn is retried, and makes a local runner wait for every other worker's share, while a
record lets the launcher stop the run within seconds with one line naming the file and the reason.
Units that start after a failure is recorded skip their work. The directory is the run's state
directory for a remote runner, and a local temporary one for the local runner, so that a full or
read-only output disk still lets a failure be told.
"""

from __future__ import annotations

import dataclasses
import json

from pipeline.dataset import storage
from schemas import formats

FAILURES_DIR = "failures"


def remote_failures_dir(output_dir: str) -> str:
    return storage.join(output_dir, formats.STATE_DIR, FAILURES_DIR)


@dataclasses.dataclass(frozen=True)
class UnitFailure:
    unit: int
    message: str  # one line, naming the input and the reason
    traceback: str

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)


def record_failure(failures_dir: str, failure: UnitFailure) -> None:
    storage.write_bytes_atomic(
        storage.join(failures_dir, f"{failure.unit:05d}.json"), failure.to_json().encode()
    )


def any_failure(failures_dir: str) -> bool:
    return bool(storage.list_files(failures_dir, ".json"))


def read_failures(failures_dir: str) -> list[UnitFailure]:
    return [
        UnitFailure(**json.loads(storage.read_text(path)))
        for path in storage.list_files(failures_dir, ".json")
    ]
