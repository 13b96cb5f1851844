"""`batches`: write the batches one host would train on to an .npz, to look at or compare.

    python -m pipeline batches DIR --split train --seq-len 1024 --batch-size 16 \\
        [--process-index 0 --process-count 1] [--seed 0] [--packing concat|document] \\
        --take 100|epoch --out batches.npz

`--batch-size` is the global batch; the arrays are [K, batch_size / process_count, seq_len].
`--take epoch` writes exactly the complete batches of one epoch.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from pipeline.load.loader import PACKINGS, LoaderConfig, LoaderError, make_dataset


def _take(value: str) -> int | None:
    """A positive batch count, or None for "epoch"."""
    if value == "epoch":
        return None
    try:
        count = int(value)
    except ValueError:
        count = 0
    if count < 1:
        raise argparse.ArgumentTypeError(f"expected a positive number of batches or 'epoch' (got {value!r})")
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m pipeline batches", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("data_dir", help="a prepared directory (holds manifest.json)")
    parser.add_argument("--split", default="train")
    parser.add_argument("--seq-len", type=int, required=True)
    parser.add_argument("--batch-size", type=int, required=True, help="global batch size, over all processes")
    parser.add_argument("--process-index", type=int, default=0)
    parser.add_argument("--process-count", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--packing", choices=PACKINGS, default="concat")
    parser.add_argument("--workers", type=int, default=0, help="prefetch worker processes")
    parser.add_argument("--take", type=_take, required=True, metavar="K|epoch")
    parser.add_argument("--out", required=True, help="the .npz file to write")
    args = parser.parse_args(argv)
    try:
        config = LoaderConfig(
            args.data_dir,
            split=args.split,
            seq_len=args.seq_len,
            global_batch_size=args.batch_size,
            seed=args.seed,
            packing=args.packing,
            num_epochs=1 if args.take is None else None,
            worker_count=args.workers,
            process_index=args.process_index,
            process_count=args.process_count,
        )
        arrays = collect(config, args.take)
        with open(args.out, "wb") as f:
            np.savez(f, **arrays)
    except (LoaderError, OSError) as e:
        print(f"batches: error: {e}", file=sys.stderr)
        return 1
    shape = "x".join(str(d) for d in arrays["inputs"].shape)
    print(f"batches: wrote {', '.join(arrays)} [{shape}] to {args.out}")
    return 0
