"""`batches`: write the batches one host would train on to an .npz, to look at or compare.

    tokshards batches DATA --split train --seq-len 1024 --batch-size 16 \\
        [--shard-index 0 --shard-count 1] [--seed 0] \\
        [--packing concat|document|document-first-fit] --take 100|epoch --out batches.npz

DATA is a data spec: a prepared directory, NAME=WEIGHT:PATH,... or a .json file (see
pipeline/load/data_spec.py). `--batch-size` is the global batch; the arrays are
[K, batch_size / shard_count, seq_len]. `--take epoch` writes exactly the complete batches of one
epoch. For a mixture the .npz also holds "source_tokens" [K, sources], and the realized token
share of each source is printed. With document packing the padding share of the batches written is
printed: what the accelerator computes on nothing at that `--seq-len`.
"""

from __future__ import annotations

import argparse

import numpy as np

from pipeline.cli.arguments import CommandParser
from pipeline.cli.commands import HelpFormatter
from pipeline.load import PACKINGS, LoaderConfig, LoaderError, make_dataset
from pipeline.load.data_spec import parse_data_spec
from pipeline.load.rows import SOURCE_TOKENS
from schemas.errors import RunError


def _take(value: str) -> int | None:
    """A positive batch count, or None for "epoch"."""
    if value == "epoch":
        return None
    try:
        count = int(value)
    except ValueError:
        count = 0
    if count < 1:
        raise argparse.ArgumentTypeError(
            f"expected a positive number of batches or 'epoch' (got {value!r})"
        )
    return count


def collect(config: LoaderConfig, take: int | None) -> dict[str, np.ndarray]:
    """The first `take` batches (all of them for a one-epoch config), stacked per array name."""
    iterator = iter(make_dataset(config))
    try:
        batches = list(iterator) if take is None else [next(iterator) for _ in range(take)]
    finally:
        iterator.close()
    if not batches:
        raise LoaderError("the loader gave no complete batch; lower --seq-len or --batch-size")
    return {name: np.stack([b[name] for b in batches]) for name in batches[0]}


def padding_share(segment_ids: np.ndarray) -> float:
    """The share of target positions that are padding (segment id 0) in document-packed batches."""
    return float(np.count_nonzero(segment_ids == 0) / segment_ids.size)


def realized_mixture(config: LoaderConfig, source_tokens: np.ndarray) -> str:
    """One line: each source's share of the target tokens, beside the share asked for."""
    totals = source_tokens.sum(axis=0)
    asked = sum(s.weight for s in config.sources)
    return ", ".join(
        f"{s.name} {n / totals.sum():.4f} (weight {s.weight / asked:.4f})"
        for s, n in zip(config.sources, totals)
    )


def parser(prog: str = "tokshards batches") -> argparse.ArgumentParser:
    p = CommandParser(prog=prog, description=__doc__, formatter_class=HelpFormatter)
    p.add_argument("data", help="a prepared directory (holds manifest.json), or a mixture spec")
    p.add_argument("--split", default="train", help="the split to read")
    p.add_argument("--seq-len", type=int, required=True, help="tokens per sequence")
    p.add_argument(
        "--batch-size",
        dest="global_batch_size",
        type=int,
        required=True,
        help="global batch size, over all shards",
    )
    p.add_argument(
        "--shard-index", type=int, default=0, help="which part of the global batch to write"
    )
    p.add_argument(
        "--shard-count", type=int, default=1, help="equal parts the global batch is split into"
    )
    p.add_argument("--seed", type=int, default=0, help="the data order's seed")
    p.add_argument(
        "--packing",
        choices=PACKINGS,
        default="concat",
        help="concat: documents run on across sequences; document: each sequence starts one, "
        "packed best fit (document-first-fit: first fit, in draw order)",
    )
    p.add_argument(
        "--workers", dest="worker_count", type=int, default=0, help="prefetch worker processes"
    )
    p.add_argument(
        "--take",
        type=_take,
        required=True,
        metavar="K|epoch",
        help="how many batches, or 'epoch' for the complete batches of one epoch",
    )
    p.add_argument("--out", required=True, help="the .npz file to write")
    return p


def main(argv: list[str] | None = None, prog: str = "tokshards batches") -> int:
    args = parser(prog).parse_args(argv)
    config = LoaderConfig(
        parse_data_spec(args.data),
        split=args.split,
        seq_len=args.seq_len,
        global_batch_size=args.global_batch_size,
        seed=args.seed,
        packing=args.packing,
        num_epochs=1 if args.take is None else None,
        worker_count=args.worker_count,
        shard_index=args.shard_index,
        shard_count=args.shard_count,
    )
    try:
        arrays = collect(config, args.take)
        with open(args.out, "wb") as f:
            np.savez(f, **arrays)
    except OSError as e:
        raise RunError(f"{e.filename or args.out}: {e.strerror or e}") from None
    shape = "x".join(str(d) for d in arrays["inputs"].shape)
    print(f"batches: wrote {', '.join(arrays)} [{shape}] to {args.out}")
    if "segment_ids" in arrays:
        print(f"batches: padding: {padding_share(arrays['segment_ids']):.2%} of target positions")
    if SOURCE_TOKENS in arrays:
        print(f"batches: realized mixture: {realized_mixture(config, arrays[SOURCE_TOKENS])}")
    return 0
