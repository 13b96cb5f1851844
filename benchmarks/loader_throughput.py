"""Tokens per second of the Grain loader against nanoGPT-style random windows from an np.memmap.

Both read the same tokens, measured in the same run, on a short-document corpus (TinyStories-like,
~200-token documents) and a long-document one (~20k-token documents). The memmap baseline is the
floor any loader is compared with: no shuffle state, no checkpointing, no document handling, just
random slices of one flat file that the page cache holds. The loader's goal is half of it or more
with prefetch workers.

    python benchmarks/loader_throughput.py [--tokens 20000000] [--seconds 3]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import numpy as np

from pipeline.load.loader import LoaderConfig, make_iterator
from schemas.records import DEFAULT_RECORD_TOKENS


SEQ_LEN = 1024
GLOBAL_BATCH = 16
N_VOCAB = 50257
EOT_ID = 50256
CORPORA = {"short docs (~200 tokens)": 200, "long docs (~20k tokens)": 20_000}


def synthetic_documents(total_tokens: int, mean_length: int, seed: int) -> list[np.ndarray]:
    """Random token documents with exponentially distributed lengths around `mean_length`."""
    rng = np.random.default_rng(seed)
    lengths = np.maximum(1, rng.exponential(mean_length, total_tokens // mean_length + 1).astype(np.int64))
    tokens = rng.integers(0, EOT_ID, int(lengths.sum()), dtype=np.uint16)
    return np.split(tokens, np.cumsum(lengths)[:-1])


def timed(next_batch, seconds: float, warmup: float = 4.0) -> float:
    """Tokens per second of `next_batch` (returns the tokens it made) over about `seconds`.

    The first `warmup` seconds are not counted: they hold the prefetch workers' start (a spawned
    interpreter importing Grain each) and the first reads.
    """
    start = time.perf_counter()
    while time.perf_counter() - start < warmup:
        next_batch()
    tokens, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds:
        tokens += next_batch()
    return tokens / elapsed


def memmap_windows(path: str, seed: int):
    """nanoGPT's get_batch: a fresh memmap per batch, random offsets, stacked int windows."""
    rng = np.random.default_rng(seed)

    def next_batch() -> int:
        data = np.memmap(path, dtype=np.uint16, mode="r")
        ix = rng.integers(0, len(data) - SEQ_LEN - 1, GLOBAL_BATCH)
        x = np.stack([data[i : i + SEQ_LEN] for i in ix]).astype(np.int32)
        y = np.stack([data[i + 1 : i + 1 + SEQ_LEN] for i in ix]).astype(np.int32)
        return x.size + 0 * y.size

    return next_batch


def loader_batches(data_dir: str, *, workers: int, packing: str):
    iterator = make_iterator(
        LoaderConfig(
            data_dir,
            seq_len=SEQ_LEN,
            global_batch_size=GLOBAL_BATCH,
            packing=packing,
            worker_count=workers,
            process_index=0,
            process_count=1,
        )
    )

    def next_batch() -> int:
        return next(iterator)["inputs"].size

    return iterator, next_batch


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=20_000_000, help="tokens per corpus")
    parser.add_argument("--seconds", type=float, default=3.0, help="measuring time per row")
    args = parser.parse_args(argv)
    # Imported here and not at the top: spawned prefetch workers re-import this module, and the
    # writer (the same record layout and shard writer as `prepare`) pulls in Beam.
    from pipeline.manifest_io import read_manifest, read_records
    from pipeline.prepare.synthetic import write_prepared

    rows = []
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
            np.concatenate(read_records(data_dir, read_manifest(data_dir), "train")).astype(np.uint16).tofile(flat)
            baseline = timed(memmap_windows(flat, seed=c), args.seconds)
            rows.append((name, "memmap random windows", baseline, 1.0))
            for packing in ("concat", "document"):
                for workers in (0, 2):
                    iterator, next_batch = loader_batches(data_dir, workers=workers, packing=packing)
                    rate = timed(next_batch, args.seconds)
                    iterator.close()
                    rows.append((name, f"loader {packing}, {workers} workers", rate, rate / baseline))
    print(f"seq_len {SEQ_LEN}, global batch {GLOBAL_BATCH}, one process, {os.cpu_count()} CPUs")
    print(f"{'corpus':<26} {'reader':<28} {'tokens/s':>14} {'vs memmap':>10}")
    for name, reader, rate, ratio in rows:
        print(f"{name:<26} {reader:<28} {rate:>14,.0f} {ratio:>10.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
