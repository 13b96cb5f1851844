"""`verify`: check a prepared directory for everything its readers check, naming every file that
fails: the manifest agreeing with itself (as reading it checks), every shard present at its size
and read whole as the loader's lengths index reads it (its bytes hashed to the manifest's, its
documents, tokens and records counted against the manifest's), the tokenizer files prepare kept
hashed to the manifest's, and no file in the split directories that the manifest does not list.

The checks are the readers' own (`pipeline.load.lengths`, `pipeline.tokenization.dataset_copy`), so
a directory `verify` passes is one that `inspect`, `batches` and `train` read, and one they refuse
is one it names. Reading a shard leaves its lengths cache entry renewed for the readers that follow.
"""

from __future__ import annotations

import argparse
import sys

from pipeline.cli.arguments import CommandParser
from pipeline.cli.commands import HelpFormatter
from pipeline.dataset import storage
from pipeline.dataset.listing import Problem, stated_problems
from pipeline.dataset.manifest_io import read_manifest
from pipeline.load import lengths
from pipeline.tokenization import TokenizerError
from pipeline.tokenization.dataset_copy import checked_file, copy_spec
from schemas.manifest import Manifest


def _shard_problems(data_dir: str, manifest: Manifest, stated: dict[str, Problem]) -> list[Problem]:
    """In manifest order, each shard's stated problem, else what reading it whole as the loader's
    lengths index reads it finds."""
    found = []
    for shard in manifest.shards:
        if shard.path in stated:
            found.append(stated[shard.path])
            continue
        try:
            lengths.shard_lengths(
                data_dir, shard, manifest.dtype, manifest.tokenizer.eot_id, rescan=True
            )
        except lengths.DamagedShard as e:
            found.append(Problem(shard.path, f"damaged: {shard.path} {e.what}"))
    return found


def _tokenizer_problems(data_dir: str, manifest: Manifest) -> list[Problem]:
    """Each file of the tokenizer copy missing or of other bytes; where the directory has no copy
    (prepared before copies were kept), the file it was prepared with missing."""
    copy = manifest.tokenizer_copy
    if copy is None:
        try:
            copy_spec(data_dir, manifest, storage.read_bytes)
        except TokenizerError as e:
            return [Problem(manifest.config.tokenizer, str(e))]
        return []
    found = []
    for relative, sha256 in copy.files.items():
        try:
            checked_file(data_dir, relative, sha256, storage.read_bytes)
        except TokenizerError as e:
            found.append(Problem(relative, str(e)))
    return found


def problems(data_dir: str, manifest: Manifest) -> list[Problem]:
    """Every file of the directory that fails a reader's check, and every stray shard file."""
    stated, strays = stated_problems(data_dir, manifest)
    return (
        _shard_problems(data_dir, manifest, stated)
        + _tokenizer_problems(data_dir, manifest)
        + strays
    )


def parser(prog: str = "tokshards verify") -> argparse.ArgumentParser:
    p = CommandParser(prog=prog, description=__doc__, formatter_class=HelpFormatter)
    p.add_argument("data_dir", help="a prepared directory (holds manifest.json)")
    return p


def main(argv: list[str] | None = None, prog: str = "tokshards verify") -> int:
    args = parser(prog).parse_args(argv)
    manifest = read_manifest(args.data_dir)
    found = problems(args.data_dir, manifest)
    for problem in found:
        print(problem.line)
    if found:
        print(
            f"verify: {len(found)} files do not match the manifest: "
            f"{', '.join(p.path for p in found)}; prepare (or copy) the directory again to "
            "repair it",
            file=sys.stderr,
        )
        return 1
    print(
        f"verify: all {len(manifest.shards)} shards match the manifest in bytes and counts, so do "
        "the tokenizer files, and nothing else is there"
    )
    return 0
