"""How much of a document-packed batch is padding: best fit (`document`) against first fit
(`document-first-fit`, the plan of loader version 2), in the same run, on the same data.

The share is that of target positions with segment id 0 (what `tokshards batches` prints), over the
first `--batches` global batches of 16 rows the loader yields, at each `seq_len` of 1024, 2048 and
4096, on two corpora written as `prepare` lays them out (records of 8192 tokens): web pages of 2k to
40k tokens (uniform), whose long documents' last pieces are what first fit pads, and short stories
(TinyStories-like, exponential lengths around 200 tokens). Each corpus holds enough tokens that no
batch of the run repeats a document.

    python benchmarks/padding_share.py [--batches 200] [--check]

`--check` exits non-zero when best fit pads more than 1.0% of the web pages' batches or 0.5% of
the short stories' at seq_len 1024.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

import numpy as np

from pipeline.load import LoaderConfig, make_iterator
from pipeline.load.batches import padding_share
from schemas.records import DEFAULT_RECORD_TOKENS

# The corpora are written by the tests' `synthetic` module, from token ids.
sys.path.insert(
    0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests")
)

ROWS = 16
SEQ_LENS = (1024, 2048, 4096)
PACKINGS = ("document", "document-first-fit")
EOT_ID = 50256
GOALS = {"web pages (2k-40k tokens)": 0.010, "short stories (~200 tokens)": 0.005}  # at 1024
CHECKED_SEQ_LEN = 1024


def corpus_lengths(name: str, tokens: int, seed: int) -> np.ndarray:
    """Document lengths adding up to at least `tokens`."""
    rng = np.random.default_rng(seed)
    if name.startswith("web"):
        lengths = rng.integers(2_000, 40_000, tokens // 21_000 + 1)
    else:
        lengths = np.maximum(1, rng.exponential(200, tokens // 200 + 1).astype(np.int64))
    return lengths[: int(np.searchsorted(np.cumsum(lengths), tokens)) + 1]


def measure(data_dir: str, *, seq_len: int, packing: str, batches: int) -> float:
    """The padding share of the loader's first `batches` batches."""
    iterator = make_iterator(
        LoaderConfig(
            data_dir,
            seq_len=seq_len,
            global_batch_size=ROWS,
            packing=packing,
            shard_index=0,
            shard_count=1,
        )
    )
    try:
        return padding_share(np.stack([next(iterator)["segment_ids"] for _ in range(batches)]))
    finally:
        iterator.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--batches", type=int, default=200, help="global batches per measurement")
    parser.add_argument(
        "--check", action="store_true", help="exit 1 unless best fit meets the goals at 1024"
    )
    args = parser.parse_args(argv)
    # Imported here: the writer (the same record layout and shard writer as `prepare`) pulls in
    # Beam.
    from support.synthetic import write_prepared

    # Padding takes rows too: a tenth more tokens than the batches hold keeps them in one epoch.
    tokens = int(args.batches * ROWS * max(SEQ_LENS) * 1.1)
    results, short = {}, []
    with tempfile.TemporaryDirectory() as tmp:
        for c, name in enumerate(GOALS):
            lengths = corpus_lengths(name, tokens, seed=c)
            ids = np.random.default_rng(c).integers(0, EOT_ID, int(lengths.sum()), dtype=np.uint16)
            data_dir = os.path.join(tmp, f"corpus{c}")
            write_prepared(
                data_dir,
                {"train": np.split(ids, np.cumsum(lengths)[:-1])},
                n_vocab=EOT_ID + 1,
                eot_id=EOT_ID,
                record_tokens=DEFAULT_RECORD_TOKENS,
                num_shards=4,
            )
            for seq_len in SEQ_LENS:
                for packing in PACKINGS:
                    share = measure(
                        data_dir, seq_len=seq_len, packing=packing, batches=args.batches
                    )
                    results[name, seq_len, packing] = share
                    goal = GOALS[name]
                    if packing == "document" and seq_len == CHECKED_SEQ_LEN and share > goal:
                        short.append(f"{name}: {share:.2%} > {goal:.1%}")
    print(f"padding share of target positions, {args.batches} batches of {ROWS} rows")
    print(f"{'corpus':<30} {'seq_len':>8} {'best fit':>9} {'first fit':>10}")
    for name in GOALS:
        for seq_len in SEQ_LENS:
            best, first = (results[name, seq_len, p] for p in PACKINGS)
            print(f"{name:<30} {seq_len:>8} {best:>9.2%} {first:>10.2%}")
    if args.check and short:
        print(f"check failed: {'; '.join(short)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
