"""`verify`: re-hash every shard against the manifest, naming each one that does not match."""

from __future__ import annotations

import argparse
import sys

from pipeline import storage
from pipeline.manifest_io import read_manifest
from schemas.manifest import Manifest, ManifestError


def problems(data_dir: str, manifest: Manifest) -> list[str]:
    found = []
    for shard in manifest.shards:
        path = storage.join(data_dir, shard.path)
        if not storage.exists(path):
            found.append(f"missing: {shard.path}")
        elif (size := storage.size(path)) != shard.bytes:
            found.append(f"wrong size: {shard.path} ({size} bytes, manifest says {shard.bytes})")
        elif storage.sha256_of(path) != shard.sha256:
            found.append(f"wrong sha256: {shard.path}")
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipeline verify", description=__doc__)
    parser.add_argument("data_dir")
    args = parser.parse_args(argv)
    try:
        manifest = read_manifest(args.data_dir)
    except ManifestError as e:
        print(f"verify: error: {e}", file=sys.stderr)
        return 2
    found = problems(args.data_dir, manifest)
    for line in found:
        print(line)
    if found:
        print(f"verify: {len(found)} of {len(manifest.shards)} shards do not match the manifest", file=sys.stderr)
        return 1
    print(f"verify: all {len(manifest.shards)} shards match the manifest")
    return 0
