"""`inspect`: what a prepared directory holds, over all of its documents, and its first documents \
as text.

Totals, per-input counts, bytes per token, skips and removals come from the manifest; document
lengths from the loader's lengths index (`pipeline.load.lengths`), which is built by one read of
every shard and cached by shard hash, so the training run that follows finds it ready.
"""

from __future__ import annotations

import argparse
import unicodedata

import numpy as np

from pipeline.cli.arguments import CommandParser, count_from
from pipeline.cli.commands import HelpFormatter
from pipeline.dataset import storage
from pipeline.dataset.manifest_io import read_manifest, read_records
from pipeline.tokenization import TokenizerError
from pipeline.tokenization.dataset_copy import load_copy
from schemas import formats
from schemas.errors import RunError, SettingError
from schemas.manifest import Manifest

PERCENTILES = (1, 10, 50, 90, 99)
# Bidirectional overrides and isolates reorder the text a terminal shows after them.
_BIDI = set(range(0x202A, 0x202F)) | set(range(0x2066, 0x206A))


class InspectError(RunError, RuntimeError):
    """An expected failure, reported in one line."""


# The most frequent languages `inspect` names; the manifest has them all.
SHOWN_LANGUAGES = 12


def printable(text: str) -> str:
    """`text` with control characters (ANSI escapes, carriage returns, bidi overrides) written as
    escapes, so a document cannot recolour the terminal or hide its text; newlines and tabs stay."""
    return "".join(
        ch
        if ch in "\n\t" or (unicodedata.category(ch) != "Cc" and ord(ch) not in _BIDI)
        else ch.encode("unicode_escape").decode("ascii")
        for ch in text
    )


def histogram(lengths: np.ndarray, bins: int = 10, width: int = 40) -> list[str]:
    if len(lengths) == 0:
        return ["  (no documents)"]
    edges = np.unique(np.geomspace(lengths.min(), lengths.max() + 1, bins + 1).astype(int))
    counts, edges = np.histogram(lengths, bins=edges)
    top = counts.max() or 1
    return [
        f"  {lo:>7}-{hi - 1:<7} {n:>9} {'#' * int(round(width * n / top))}"
        for lo, hi, n in zip(edges[:-1], edges[1:], counts)
    ]


def length_summary(lengths: np.ndarray) -> str:
    if len(lengths) == 0:
        return "  (no documents)"
    values = np.percentile(lengths, PERCENTILES, method="lower")
    listed = ", ".join(f"p{p} {int(v)}" for p, v in zip(PERCENTILES, values))
    return (
        f"  min {int(lengths.min())}, {listed}, max {int(lengths.max())}, mean {lengths.mean():.1f}"
    )


def _split_lengths(data_dir: str, manifest: Manifest, split: str):
    """The split's lengths index, which checks every shard it reads against the manifest: a
    missing or damaged shard is a LoaderError (a run error) naming it."""
    try:
        from pipeline.load.lengths import SplitLengths
    except ImportError as e:
        raise InspectError(
            "document statistics read the loader's lengths index, which needs the load extra "
            f"({e.name} is missing): pip install 'tokshards[load]'"
        ) from None
    return SplitLengths.of(data_dir, manifest, split)


def _plot(lengths: np.ndarray, path: str, title: str) -> None:
    try:
        import matplotlib
    except ImportError:
        raise InspectError("--plot needs matplotlib: pip install 'tokshards[plot]'") from None
    matplotlib.use("Agg")  # files only, whatever display there is
    from matplotlib import pyplot as plt

    figure, axes = plt.subplots(figsize=(8, 4.5))
    edges = (
        np.unique(np.geomspace(1, max(int(lengths.max()) + 1, 2), 60).astype(int))
        if len(lengths)
        else [1, 2]
    )
    axes.hist(lengths, bins=edges)
    axes.set_xscale("log")
    axes.set_xlabel("tokens per document")
    axes.set_ylabel("documents")
    axes.set_title(title)
    figure.tight_layout()
    try:
        with storage.atomic_local_file(path) as scratch:
            figure.savefig(scratch, format="png", dpi=120)
    except OSError as e:
        raise InspectError(f"cannot write --plot {path}: {e.strerror or e}") from None
    finally:
        plt.close(figure)


def describe(manifest: Manifest) -> list[str]:
    """The manifest's account of the directory: tokenizer, totals, inputs, skips and removals."""
    info = manifest.tokenizer
    lines = [
        f"tokenizer {info.name} ({info.library} {info.library_version}, n_vocab {info.n_vocab}), "
        f"dtype {manifest.dtype}",
        f"documents: {info.boundary or f'end-of-text {info.eot_id} after each'}",
    ]
    for split, t in manifest.totals.items():
        lines.append(
            f"{split}: {t.documents} documents, {t.tokens} tokens, {t.records} records, {t.shards} "
            f"shards, {t.bytes} bytes"
        )
    tokens = sum(t.tokens for t in manifest.totals.values())
    size = sum(i.size for i in manifest.inputs)
    counted = {k: n for k, n in manifest.skipped.items() if k in formats.UNRECORDED_SKIPS}
    recorded = {k: n for k, n in manifest.skipped.items() if k not in formats.UNRECORDED_SKIPS}
    # Input bytes per token is the tokenizer's compression only where every input byte became
    # tokens: removed documents and rejected lines are in the bytes and not in the tokens.
    untokenized = [
        f"{n} documents that were removed" for n in [sum(manifest.removed.values())] if n
    ]
    untokenized += [f"{n} skipped lines, rows or files" for n in [sum(recorded.values())] if n]
    if untokenized:
        lines.append(
            "input bytes per token: not measured: the inputs' bytes hold "
            f"{' and '.join(untokenized)}, which have no tokens"
        )
    elif tokens:
        lines.append(
            f"input bytes per token: {size / tokens:.3f} ({size} bytes in {len(manifest.inputs)} "
            "inputs)"
        )
    lines.append("inputs:")
    for item in manifest.inputs:
        if item.documents is None:
            lines.append(f"  {printable(item.path)} ({item.format}, {item.size} bytes)")
            continue
        per_token = (
            f", {item.size / item.tokens:.3f} bytes per token"
            if item.tokens and not untokenized
            else ""
        )
        lines.append(
            f"  {printable(item.path)} ({item.format}, {item.size} bytes): {item.documents} "
            f"documents, {item.tokens} tokens{per_token}"
        )
    if recorded:
        lines.append(
            f"skipped (see {formats.REJECTS_NAME}): "
            + ", ".join(f"{k} {v}" for k, v in recorded.items())
        )
    if counted:
        lines.append("skipped, counted only: " + ", ".join(f"{k} {v}" for k, v in counted.items()))
    if manifest.removed:
        lines.append(
            "removed (see removals.jsonl): "
            + ", ".join(f"{k} {v}" for k, v in manifest.removed.items())
        )
    if manifest.languages:
        ranked = sorted(
            manifest.languages.items(),
            key=lambda item: (-item[1]["kept"] - item[1]["removed"], item[0]),
        )
        shown = ", ".join(
            f"{k} {v['kept']}/{v['removed']}"
            + (  # from version 9
                f" ({v['tokens_kept']} tokens kept, {v['bytes_removed']} bytes removed)"
                if "tokens_kept" in v
                else ""
            )
            for k, v in ranked[:SHOWN_LANGUAGES]
        )
        more = len(ranked) - SHOWN_LANGUAGES
        lines.append(
            f"languages (documents kept/removed): {shown}"
            + (f" and {more} more (see manifest.json)" if more > 0 else "")
        )
    if manifest.pii:
        lines.append(
            "PII replaced: "
            + ", ".join(f"{k} {v}" for k, v in manifest.pii.items() if k != "documents")
            + f" in {manifest.pii.get('documents', 0)} documents"
        )
    for e in manifest.eval_files:
        common = (
            f"; {e.common_ngrams} of its {e.ngrams} n-grams common text (see common_ngrams.jsonl)"
            if e.common_ngrams
            else ""
        )
        lines.append(
            f"  decontaminated against {e.path} (sha256 {e.sha256[:12]}): {e.removed} "
            f"documents{common}"
        )
    return lines


def _first_documents(
    data_dir: str, manifest: Manifest, split: str, lengths, count: int
) -> list[str]:
    """The split's first `count` documents as text, read from the records that hold them alone."""
    if count <= 0 or lengths.records == 0:
        return []
    docs = np.concatenate([d[:count] for d in lengths.docs])[:count].astype(np.int64)
    needed = int(docs.sum())
    records = int(lengths.runs(np.array([0]), np.array([needed]))[1].max()) + 1
    tokens = np.concatenate(read_records(data_dir, manifest, split, records))[:needed]
    tokenizer = load_copy(data_dir, manifest, storage.read_bytes)
    bos = manifest.tokenizer.bos_id
    out = []
    for i, (start, end) in enumerate(
        zip(np.concatenate(([0], np.cumsum(docs)[:-1])), np.cumsum(docs))
    ):
        ids = tokens[start : end - 1]  # less the end-of-text id
        if bos is not None and len(ids) and ids[0] == bos:
            ids = ids[1:]
        out.append(
            f"--- document {i} ({docs[i]} tokens) ---\n{printable(tokenizer.decode(ids.tolist()))}"
        )
    return out


def parser(prog: str = "tokshards inspect") -> argparse.ArgumentParser:
    p = CommandParser(prog=prog, description=__doc__, formatter_class=HelpFormatter)
    p.add_argument("data_dir", help="a prepared directory (the --output of prepare)")
    p.add_argument(
        "--split", default="train", help="the split whose documents are measured and shown"
    )
    p.add_argument(
        "--documents", type=count_from(0), default=3, help="how many documents to print as text"
    )
    p.add_argument(
        "--plot",
        metavar="FILE.png",
        default=None,
        help="write a histogram of the split's document lengths there (needs matplotlib; default: "
        "none)",
    )
    return p


def run(args: argparse.Namespace) -> None:
    manifest = read_manifest(args.data_dir)
    if args.split not in manifest.totals:
        raise SettingError(
            "split", args.split, f"must name a split of {args.data_dir}: {sorted(manifest.totals)}"
        )
    lengths = _split_lengths(args.data_dir, manifest, args.split)
    print("\n".join(describe(manifest)))
    every = np.concatenate(lengths.docs) if lengths.docs else np.zeros(0, np.uint32)
    print(
        f"{args.split} document lengths in tokens, boundary tokens included ({len(every)} "
        "documents):"
    )
    print(length_summary(every))
    print("\n".join(histogram(every)))
    if args.plot:
        _plot(every, args.plot, f"{args.data_dir} ({args.split}): {len(every)} documents")
        print(f"wrote {args.plot}")
    try:
        shown = _first_documents(args.data_dir, manifest, args.split, lengths, args.documents)
    except TokenizerError as e:
        raise InspectError(f"cannot show documents: {e}") from None
    if shown:
        print("\n".join(shown))


def main(argv: list[str] | None = None, prog: str = "tokshards inspect") -> int:
    run(parser(prog).parse_args(argv))
    return 0
