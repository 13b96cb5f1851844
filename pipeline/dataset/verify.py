"""`verify`: check a prepared directory against its manifest: every shard re-hashed, no file in the
split directories that the manifest does not list, totals that add up (as reading the manifest
checks), naming each file that does not match."""

from __future__ import annotations

import argparse
import sys

from pipeline.cli.commands import HelpFormatter
from pipeline.dataset import storage
from pipeline.dataset.integrity import shard_problems
from pipeline.dataset.manifest_io import read_manifest, shard_sizes
from schemas.manifest import Manifest


def problems(data_dir: str, manifest: Manifest, *, hashes: bool = True) -> list[str]:
    """What does not match the manifest, a line each. Without `hashes`, sizes and strays alone:
    one listing per split, for a reader that hashes each shard as it reads it (`export`)."""
    sizes = shard_sizes(data_dir)
    found = shard_problems(
        manifest.shards,
        size_of=sizes.get,
        open_binary=lambda relative: storage.open_raw(storage.join(data_dir, relative)),
        hashes=hashes,
    )
    listed = {s.path for s in manifest.shards}
    strays = [f"not in the manifest: {path}" for path in sorted(set(sizes) - listed)]
    return [str(p) for p in found] + strays


def parser(prog: str = "tokshards verify") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description=__doc__, formatter_class=HelpFormatter)
    p.add_argument("data_dir", help="a prepared directory (holds manifest.json)")
    return p


def main(argv: list[str] | None = None, prog: str = "tokshards verify") -> int:
    args = parser(prog).parse_args(argv)
    manifest = read_manifest(args.data_dir)
    found = problems(args.data_dir, manifest)
    for line in found:
        print(line)
    if found:
        print(
            f"verify: {len(found)} files do not match the manifest's {len(manifest.shards)} "
            "shards (listed above): prepare (or copy) the directory again to repair it",
            file=sys.stderr,
        )
        return 1
    print(
        f"verify: all {len(manifest.shards)} shards match the manifest, and nothing else is there"
    )
    return 0
