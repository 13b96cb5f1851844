"""Content hashes of files, and the check of a prepared directory's shards against its manifest.

Shared by `verify` (through Beam's filesystems) and the loader's `open_prepared` (through
`etils.epath`): each side says how to stat and open a shard, so neither imports the other's stack.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable, Iterable, Iterator
from typing import BinaryIO

from schemas.manifest import ShardInfo


def file_sha256(f: BinaryIO) -> str:
    """SHA-256 of everything left in a binary file object, read in blocks."""
    return hashlib.file_digest(f, "sha256").hexdigest()


@dataclasses.dataclass(frozen=True)
class ShardProblem:
    """A shard that does not match the manifest: `missing`, wrong `size`, or wrong `sha256`."""

    shard: ShardInfo
    kind: str
    size: int | None = None

    def __str__(self) -> str:
        if self.kind == "size":
            return (
                f"wrong size: {self.shard.path} ({self.size} bytes, manifest says "
                f"{self.shard.bytes})"
            )
        return f"{'missing' if self.kind == 'missing' else 'wrong sha256'}: {self.shard.path}"


def shard_problems(
    shards: Iterable[ShardInfo],
    *,
    size_of: Callable[[str], int | None],
    open_binary: Callable[[str], BinaryIO],
    hashes: bool,
) -> Iterator[ShardProblem]:
    """Problems in manifest order. `size_of(path)` is None for a missing shard; paths are relative.

    Sizes cost one stat each and catch a truncated copy; hashes read every byte, so they are asked
    for explicitly.
    """
    for shard in shards:
        size = size_of(shard.path)
        if size is None:
            yield ShardProblem(shard, "missing")
        elif size != shard.bytes:
            yield ShardProblem(shard, "size", size)
        elif hashes:
            with open_binary(shard.path) as f:
                if file_sha256(f) != shard.sha256:
                    yield ShardProblem(shard, "sha256")
