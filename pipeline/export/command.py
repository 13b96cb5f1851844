"""`export`: a prepared directory's splits as the token files another trainer reads: Megatron-LM's
indexed dataset (`megatron`), nanoGPT's and llm.c's flat binaries (`nanogpt`, `llmc`), datatrove's
`.ds` files for nanotron (`datatrove`). Documents in the order prepare wrote them, whole, with the
boundary ids it wrote; `tokshards_export.json`, written last, names the manifest they came from.

The directory is checked as `verify` checks it (sizes and stray files first, each shard's hash as
it is read); every file is written under a scratch name and renamed whole, so an interrupted or
failed export leaves no file that looks complete, and a rerun writes the same bytes.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import re

from pipeline.cli.arguments import CommandParser
from pipeline.cli.commands import HelpFormatter
from pipeline.dataset import storage
from pipeline.dataset.integrity import repair_hint
from pipeline.dataset.listing import listing_problems
from pipeline.dataset.manifest_io import read_manifest
from pipeline.export.split_stream import ExportError, split_chunks
from pipeline.export.targets import TARGETS, Target
from schemas import formats
from schemas.errors import SettingError
from schemas.manifest import Manifest

# The loader's NAME=WEIGHT:PATH entries (pipeline/load/data_spec.py); a .json names a mixture too.
_MIXTURE_ENTRY = re.compile(r"[A-Za-z0-9_.-]+=[^:,]+:")


@dataclasses.dataclass(frozen=True)
class ExportedSplit:
    documents: int
    tokens: int
    dtype: str
    files: dict[str, int]  # relative path -> bytes


def parser(prog: str = "tokshards export") -> argparse.ArgumentParser:
    p = CommandParser(prog=prog, description=__doc__, formatter_class=HelpFormatter)
    p.add_argument(
        "data_dir",
        help="one prepared directory (holds manifest.json); export a mixture's directories one "
        "at a time",
    )
    p.add_argument(
        "--format",
        required=True,
        choices=sorted(TARGETS),
        help="megatron: SPLIT.bin + SPLIT.idx; nanogpt: train.bin, val.bin (uint16); llmc: "
        "train.bin, val.bin with llm.c's header; datatrove: SPLIT/SPLIT.ds + .ds.index",
    )
    p.add_argument(
        "--output", required=True, help="the directory to write the files in (local or gs://)"
    )
    p.add_argument(
        "--split",
        action="append",
        choices=formats.SPLITS,
        default=None,
        help="a split to export, each to its own files (repeat for both; default: every split "
        "the directory has)",
    )
    return p


def run(args: argparse.Namespace) -> dict[str, ExportedSplit]:
    _refuse_mixture(args.data_dir)
    manifest = read_manifest(args.data_dir)
    target = TARGETS[args.format]
    splits = list(dict.fromkeys(args.split)) if args.split else list(manifest.totals)
    for split in splits:
        if split not in manifest.totals:
            raise SettingError(
                "split", split, f"must name a split of {args.data_dir}: {sorted(manifest.totals)}"
            )
        target.dtype(manifest.tokenizer.n_vocab, manifest.totals[split].tokens)
    if storage.is_within(args.output, args.data_dir):
        raise SettingError(
            "output",
            args.output,
            f"lies inside the prepared directory {args.data_dir}, whose files its manifest lists "
            "alone: write the export elsewhere",
        )
    found = listing_problems(args.data_dir, manifest)
    if found:
        more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
        raise ExportError(f"{found[0].line}{more}; {repair_hint(args.data_dir)}")

    record = storage.join(args.output, formats.EXPORT_NAME)
    exported = {}
    try:
        storage.makedirs(args.output)
        storage.delete([record])  # until it is written again, the files are no complete export
        for split in splits:
            exported[split] = export_split(args.data_dir, manifest, split, target, args.output)
            print(
                f"{split}: {exported[split].documents} documents, {exported[split].tokens} "
                "tokens -> "
                + ", ".join(storage.join(args.output, name) for name in exported[split].files)
            )
        storage.write_bytes_atomic(
            record, export_record(args.data_dir, manifest, target, exported).encode()
        )
    except OSError as e:
        raise ExportError(f"cannot write the export to {args.output}: {e.strerror or e}") from None
    print(f"wrote {record}")
    return exported


def export_split(
    data_dir: str, manifest: Manifest, split: str, target: Target, output: str
) -> ExportedSplit:
    """Writes one split's files under scratch names, checks them against the manifest's totals,
    then renames each into place, tokens before index."""
    totals = manifest.totals[split]
    dtype = target.dtype(manifest.tokenizer.n_vocab, totals.tokens)
    names = target.files(split)
    finals = [storage.join(output, name) for name in names]
    scratch: list[str] = []
    try:
        scratch += [storage.new_scratch(path) for path in finals]
        files = target.open(tuple(scratch), dtype, totals.tokens)
        try:
            tokens = documents = last_end = 0
            for chunk in split_chunks(data_dir, manifest, split):
                files.add(chunk)
                tokens += len(chunk.tokens)
                documents += len(chunk.ends)
                last_end = int(chunk.ends[-1]) if len(chunk.ends) else last_end
            if (documents, tokens) != (totals.documents, totals.tokens) or last_end != tokens:
                raise ExportError(
                    f"the {split} split holds {documents} documents in {tokens} tokens (the last "
                    f"ending at {last_end}), its manifest says {totals.documents} in "
                    f"{totals.tokens}; {repair_hint(data_dir)}"
                )
            files.finish()
        finally:
            files.close()
        sizes = {name: os.path.getsize(path) for name, path in zip(names, scratch)}
        for path, final in zip(scratch, finals):
            storage.publish(path, final)
    finally:
        for path in scratch:
            storage.discard(path)
    return ExportedSplit(documents, tokens, dtype.name, sizes)


def export_record(
    data_dir: str, manifest: Manifest, target: Target, exported: dict[str, ExportedSplit]
) -> str:
    """The sidecar: which manifest (by the SHA-256 of its bytes) and tokenizer the files hold, and
    what each file is. Canonical JSON, so a rerun writes the same bytes."""
    info = manifest.tokenizer
    manifest_bytes = storage.read_bytes(storage.join(data_dir, formats.MANIFEST_NAME))
    record = {
        "format": formats.EXPORT_FORMAT,
        "version": formats.EXPORT_VERSION,
        "target": target.name,
        "source": {
            "path": data_dir,
            "manifest_sha256": hashlib.sha256(manifest_bytes).hexdigest(),
            "tokenizer": {
                "name": info.name,
                "vocab_sha256": info.vocab_sha256,
                "n_vocab": info.n_vocab,
                "eot_id": info.eot_id,
                "bos_id": info.bos_id,
                "boundary": info.boundary or f"end-of-text {info.eot_id} after each document",
            },
        },
        "splits": {split: dataclasses.asdict(e) for split, e in exported.items()},
    }
    return json.dumps(record, indent=2, sort_keys=True) + "\n"


def _refuse_mixture(data: str) -> None:
    if storage.exists(storage.join(data, formats.MANIFEST_NAME)):
        return
    if data.endswith(".json") or _MIXTURE_ENTRY.match(data):
        raise SettingError(
            "data_dir",
            data,
            "names a mixture; an export is of one prepared directory: export each of the "
            "mixture's directories on its own",
        )


def main(argv: list[str] | None = None, prog: str = "tokshards export") -> int:
    run(parser(prog).parse_args(argv))
    return 0
