"""`flaky://` paths: local files whose reads fail for a while, to inject transient faults into a
run.

`flaky:///abs/path` is `/abs/path`. While fewer than `FLAKY_FAILURES` (an environment variable)
reads have failed, each read of a file opened through it raises ConnectionResetError, as a dropped
connection to an object store would. The count lives in files under `FLAKY_STATE_DIR`, so it holds
across the launcher and every worker process. Everything but reading works untouched.
"""

from __future__ import annotations

import io
import os

from apache_beam.io.filesystem import CompressionTypes, FileMetadata
from apache_beam.io.localfilesystem import LocalFileSystem

PREFIX = "flaky://"


def _local(path: str) -> str:
    return path[len(PREFIX) :] if path.startswith(PREFIX) else path


def _should_fail() -> bool:
    """Takes one failure from the shared budget, if any is left."""
    state, budget = os.environ["FLAKY_STATE_DIR"], int(os.environ["FLAKY_FAILURES"])
    for number in range(budget):
        try:
            os.close(os.open(os.path.join(state, f"failure-{number}"), os.O_CREAT | os.O_EXCL))
            return True
        except FileExistsError:
            continue
    return False


class _FlakyReader(io.BufferedReader):
    def read(self, size=-1):
        if _should_fail():
            raise ConnectionResetError(104, "Connection reset by peer (injected)")
        return super().read(size)


class FlakyFileSystem(LocalFileSystem):
    @classmethod
    def scheme(cls) -> str:
        return "flaky"

    def open(
        self, path, mime_type="application/octet-stream", compression_type=CompressionTypes.AUTO
    ):
        return _FlakyReader(io.FileIO(_local(path), "rb"))

    def exists(self, path) -> bool:
        return super().exists(_local(path))

    def size(self, path) -> int:
        return super().size(_local(path))

    def checksum(self, path) -> str:
        return super().checksum(_local(path))

    def last_updated(self, path) -> float:
        return super().last_updated(_local(path))

    def metadata(self, path) -> FileMetadata:
        local = _local(path)
        return FileMetadata(path, os.path.getsize(local), os.path.getmtime(local))
