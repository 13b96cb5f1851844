"""`inspect`: totals per split, a document-length histogram and the first documents as text."""

from __future__ import annotations

import argparse
import sys

import numpy as np

from pipeline.cli import HelpFormatter
from pipeline.manifest_io import read_manifest, read_records
from pipeline.tokenization import load_tokenizer
from schemas.manifest import ManifestError


def document_lengths(tokens: np.ndarray, eot: int) -> np.ndarray:
    """Lengths (with their end-of-text token) of the complete documents in a token run."""
    ends = np.flatnonzero(tokens == eot)
    return np.diff(np.concatenate(([-1], ends)))


def histogram(lengths: np.ndarray, bins: int = 10, width: int = 40) -> list[str]:
    if len(lengths) == 0:
        return ["  (no complete documents)"]
    edges = np.unique(np.geomspace(1, lengths.max() + 1, bins + 1).astype(int))
    counts, edges = np.histogram(lengths, bins=edges)
    top = counts.max() or 1
    return [
        f"  {lo:>7}-{hi - 1:<7} {n:>8} {'#' * int(round(width * n / top))}"
        for lo, hi, n in zip(edges[:-1], edges[1:], counts)
    ]


def parser(prog: str = "tokshards inspect") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description=__doc__, formatter_class=HelpFormatter)
    p.add_argument("data_dir", help="a prepared directory (holds manifest.json)")
    p.add_argument("--split", default="train", help="the split to show")
    p.add_argument("--documents", type=int, default=3, help="how many documents to print")
    p.add_argument("--max-records", type=int, default=200, help="records read for the histogram")
    return p


def main(argv: list[str] | None = None, prog: str = "tokshards inspect") -> int:
    args = parser(prog).parse_args(argv)
    try:
        manifest = read_manifest(args.data_dir)
    except ManifestError as e:
        print(f"inspect: error: {e}", file=sys.stderr)
        return 2
    info = manifest.tokenizer
    print(f"tokenizer {info.name} ({info.library} {info.library_version}, n_vocab {info.n_vocab}), dtype {manifest.dtype}")
    print(f"documents: {info.boundary or f'end-of-text {info.eot_id} after each'}")
    for split, t in manifest.totals.items():
        print(f"{split}: {t.documents} documents, {t.tokens} tokens, {t.records} records, {t.shards} shards, {t.bytes} bytes")
    if manifest.skipped:
        print("skipped:", ", ".join(f"{k} {v}" for k, v in manifest.skipped.items()))
    if manifest.removed:
        print("removed (see removals.jsonl):", ", ".join(f"{k} {v}" for k, v in manifest.removed.items()))
    for e in manifest.eval_files:
        common = f"; {e.common_ngrams} of its {e.ngrams} n-grams common text (see common_ngrams.jsonl)" if e.common_ngrams else ""
        print(f"  decontaminated against {e.path} (sha256 {e.sha256[:12]}): {e.removed} documents{common}")
    if args.split not in manifest.totals:
        print(f"inspect: error: no split {args.split!r} (splits: {sorted(manifest.totals)})", file=sys.stderr)
        return 2
    records = read_records(args.data_dir, manifest, args.split, args.max_records)
    tokens = np.concatenate(records) if records else np.zeros(0, dtype=np.uint32)
    eot = manifest.tokenizer.eot_id
    lengths = document_lengths(tokens, eot)
    print(f"document lengths in tokens ({len(lengths)} documents from the first {args.max_records} records):")
    print("\n".join(histogram(lengths)))
    config = manifest.config
    tokenizer = load_tokenizer(config.tokenizer, bos_token=config.bos_token, eos_token=config.eos_token)
    starts = np.concatenate(([0], np.cumsum(lengths)))
    for i in range(min(args.documents, len(lengths))):
        ids = tokens[starts[i] : starts[i + 1] - 1]
        if info.bos_id is not None and len(ids) and ids[0] == info.bos_id:  # a cut document's later pieces have none
            ids = ids[1:]
        text = tokenizer.decode(ids.tolist())
        print(f"--- document {i} ({lengths[i]} tokens) ---\n{text}")
    return 0
