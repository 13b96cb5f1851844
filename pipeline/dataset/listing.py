"""What a listing of a prepared directory tells without reading a shard: shards missing or of
another size, files the manifest does not list. `verify` goes on to read every shard; `export`,
which checks each shard as it reads it, needs no more, and so neither the loader's extra."""

from __future__ import annotations

import dataclasses

from pipeline.dataset import storage
from pipeline.dataset.integrity import shard_problems
from pipeline.dataset.manifest_io import shard_sizes
from schemas.manifest import Manifest


@dataclasses.dataclass(frozen=True)
class Problem:
    """A file that fails a check: its path (relative to the directory where it lies inside it)
    and the line that says how."""

    path: str
    line: str


def stated_problems(data_dir: str, manifest: Manifest) -> tuple[dict[str, Problem], list[Problem]]:
    """A stat each, no read: each shard missing or of another size (by path), and each stray file
    in the split directories."""
    sizes = shard_sizes(data_dir)
    stated = {}
    for shard in manifest.shards:
        for problem in shard_problems(
            [shard],
            size_of=sizes.get,
            open_binary=lambda relative: storage.open_raw(storage.join(data_dir, relative)),
            hashes=False,
        ):
            stated[shard.path] = Problem(shard.path, str(problem))
    listed = {s.path for s in manifest.shards}
    strays = [Problem(path, f"not in the manifest: {path}") for path in sorted(set(sizes) - listed)]
    return stated, strays


def listing_problems(data_dir: str, manifest: Manifest) -> list[Problem]:
    """The checks a listing answers (shards missing or of another size, strays), for a reader that
    checks each shard as it reads it (`export`) and need not read every shard twice."""
    stated, strays = stated_problems(data_dir, manifest)
    return list(stated.values()) + strays
