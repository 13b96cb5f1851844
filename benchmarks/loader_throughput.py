"""Tokens per second of the Grain loader against nanoGPT-style random windows from an np.memmap.

All readers read the same tokens, measured in the same run, on a short-document corpus
(TinyStories-like, ~200-token documents) and a long-document one (~20k-token documents). The memmap
baseline is the floor any loader is compared with: no shuffle state, no checkpointing, no document
handling, just random slices of one flat file that the page cache holds. It is measured again right
before each reader in each round, and each ratio is against that measurement, so that a load that
drifts during the run (other work on a shared machine) skews the ratios less; each reader is
measured for several rounds (one open iterator) and the round with the median ratio is kept.
The loader's goal is half of it or more with 2 prefetch workers, for both packings; `--check` exits
non-zero when either falls short on either corpus. Document packing's best fit (`document`) is
measured beside the first fit it replaced (`document-first-fit`), with 0 and 2 workers: `--check`
also exits non-zero when best fit's ratio falls below first fit's by more than `SAME`, the
spread of rounds on a shared machine. The loader's lengths index is built (one scan of the corpus,
then cached) before anything is timed: a training run pays it once per machine and corpus.

    python benchmarks/loader_throughput.py [--tokens 20000000] [--seconds 3] [--rounds 3] [--check]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable

import grain
import numpy as np

from pipeline.load import PACKINGS, LoaderConfig, make_iterator
from schemas.records import DEFAULT_RECORD_TOKENS

# The corpora are written by the tests' `synthetic` module, from token ids.
sys.path.insert(
    0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests")
)

SEQ_LEN = 1024
GLOBAL_BATCH = 16
N_VOCAB = 50257
EOT_ID = 50256
CORPORA = {"short docs (~200 tokens)": 200, "long docs (~20k tokens)": 20_000}
GOAL = 0.5
SAME = 0.9  # best fit's ratio against first fit's that --check still calls as fast
CHECKED_WORKERS = 2


def synthetic_documents(total_tokens: int, mean_length: int, seed: int) -> list[np.ndarray]:
    """Random token documents with exponentially distributed lengths around `mean_length`."""
    rng = np.random.default_rng(seed)
    lengths = np.maximum(
        1, rng.exponential(mean_length, total_tokens // mean_length + 1).astype(np.int64)
    )
    tokens = rng.integers(0, EOT_ID, int(lengths.sum()), dtype=np.uint16)
    return np.split(tokens, np.cumsum(lengths)[:-1])


def timed(next_batch: Callable[[], int], seconds: float, warmup: float = 2.0) -> float:
    """Tokens per second of `next_batch` (returns the tokens it made) over about `seconds`.

    The first batch and the `warmup` seconds after it are not counted: they hold the prefetch
    workers' start (a spawned interpreter importing Grain each, seconds on a loaded machine) and
    the first reads.
    """
    next_batch()
    start = time.perf_counter()
    while time.perf_counter() - start < warmup:
        next_batch()
    tokens, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds:
        tokens += next_batch()
    return tokens / elapsed


def memmap_windows(path: str, seed: int) -> Callable[[], int]:
    """nanoGPT's get_batch: a fresh memmap per batch, random offsets, stacked int windows."""
    rng = np.random.default_rng(seed)

    def next_batch() -> int:
        data = np.memmap(path, dtype=np.uint16, mode="r")
        ix = rng.integers(0, len(data) - SEQ_LEN - 1, GLOBAL_BATCH)
        x = np.stack([data[i : i + SEQ_LEN] for i in ix]).astype(np.int32)
        y = np.stack([data[i + 1 : i + 1 + SEQ_LEN] for i in ix]).astype(np.int32)
        return x.size + 0 * y.size

    return next_batch


def config(data_dir: str, *, packing: str, workers: int) -> LoaderConfig:
    return LoaderConfig(
        data_dir,
        seq_len=SEQ_LEN,
        global_batch_size=GLOBAL_BATCH,
        packing=packing,
        worker_count=workers,
        shard_index=0,
        shard_count=1,
    )


def readers(data_dir: str, workers: int) -> dict[str, Callable[[], grain.DatasetIterator]]:
    """Name -> a function opening that reader's batch iterator."""
    return {
        f"loader {packing}, {workers} workers": lambda packing=packing: make_iterator(
            config(data_dir, packing=packing, workers=workers)
        )
        for packing in PACKINGS
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tokens", type=int, default=20_000_000, help="tokens per corpus")
    parser.add_argument(
        "--seconds", type=float, default=3.0, help="measuring time per reader and round"
    )
    parser.add_argument(
        "--rounds", type=int, default=3, help="rounds per reader; the median ratio is kept"
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help=f"exit 1 unless every packing reaches {GOAL} of memmap and best fit first fit's speed",
    )
    args = parser.parse_args(argv)
    # Imported here and not at the top: spawned prefetch workers re-import this module, and the
    # writer (the same record layout and shard writer as `prepare`) pulls in Beam.
    from pipeline.dataset.manifest_io import read_manifest, read_records
    from support.synthetic import write_prepared

    rows, short = [], []
    median: dict[tuple[str, str], float] = {}  # (corpus, reader) -> its median ratio
    with tempfile.TemporaryDirectory() as tmp:
        for c, (name, mean_length) in enumerate(CORPORA.items()):
            data_dir = os.path.join(tmp, f"corpus{c}")
            write_prepared(
                data_dir,
                {"train": synthetic_documents(args.tokens, mean_length, seed=c)},
                n_vocab=N_VOCAB,
                eot_id=EOT_ID,
                record_tokens=DEFAULT_RECORD_TOKENS,
                num_shards=8,
            )
            flat = os.path.join(tmp, f"corpus{c}.bin")
            np.concatenate(read_records(data_dir, read_manifest(data_dir), "train")).astype(
                np.uint16
            ).tofile(flat)
            memmap = memmap_windows(flat, seed=c)
            warm = make_iterator(config(data_dir, packing="concat", workers=0))
            next(warm)  # builds the lengths index
            warm.close()
            for workers in (0, CHECKED_WORKERS):
                for reader, open_reader in readers(data_dir, workers).items():
                    iterator = open_reader()
                    rounds = []
                    for r in range(args.rounds):
                        # The reference is measured right before the reader: the machine's load
                        # drifts.
                        baseline = timed(memmap, args.seconds, warmup=0.5)
                        rate = timed(
                            lambda iterator=iterator: next(iterator)["inputs"].size,
                            args.seconds,
                            warmup=2.0 if r == 0 else 1.0,
                        )
                        rounds.append((rate / baseline, rate, baseline))
                    iterator.close()
                    ratio, rate, baseline = sorted(rounds)[len(rounds) // 2]
                    rows.append((name, reader, rate, baseline, [r[0] for r in rounds]))
                    if workers == CHECKED_WORKERS and ratio < GOAL:
                        short.append(f"{reader} on {name}: {ratio:.2f} of memmap")
                    median[name, reader] = ratio
                best, first = (
                    median[name, f"loader {p}, {workers} workers"]
                    for p in ("document", "document-first-fit")
                )
                if best < SAME * first:
                    short.append(
                        f"best fit on {name}, {workers} workers: {best:.2f} against first fit's "
                        f"{first:.2f}"
                    )
    print(
        f"seq_len {SEQ_LEN}, global batch {GLOBAL_BATCH}, one process, {os.cpu_count()} CPUs, "
        f"median of {args.rounds} rounds"
    )
    print(
        f"{'corpus':<26} {'reader':<38} {'tokens/s':>14} {'memmap just before':>19} "
        f"{'vs memmap':>10}  rounds"
    )
    for name, reader, rate, baseline, ratios in rows:
        print(
            f"{name:<26} {reader:<38} {rate:>14,.0f} {baseline:>19,.0f} {rate / baseline:>10.2f}  "
            f"{' '.join(f'{r:.2f}' for r in ratios)}"
        )
    if args.check and short:
        print(f"check failed: {'; '.join(short)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
