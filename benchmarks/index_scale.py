"""Memory and start-up time of the loader's global index at 10^7 records (one source, one host).

Writes the lengths cache a scan would leave for a split of `--records` records in 100 shards (1 to
4 whole documents per record, as `pipeline.load.lengths` lays it out) and, for document packing,
derives its units (once per machine and `seq_len`, timed), then, in a fresh process, measures what
a training host pays: opening the lengths (each file checked against its digest, then mapped) and
the planner, planning the first batch (and, of that, the digest checks alone; with `--rounds N`,
alternating with a reference process that maps the entries unchecked, as layout 3 opened them),
resuming at a position far into the run (a checkpoint's few integers: no replay), and the steady
cost of planning a step; with the process's resident memory after each.

    python benchmarks/index_scale.py [--records 10000000] [--packing document] [--steps 2000] \
[--rows 16] [--rounds 1]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from pipeline.load import lengths  # noqa: E402
from pipeline.load.global_index import Planner, Position, Stage  # noqa: E402
from schemas.manifest import ShardInfo  # noqa: E402

SHARDS = 100
EOT_ID = 50256


def _shard(index: int, records: int) -> ShardInfo:
    return ShardInfo(
        split="train",
        path=f"train-{index:05d}",
        unit=index,
        records=records,
        documents=0,
        tokens=0,
        bytes=0,
        sha256=f"{index:064x}",
    )


def write_cache(records: int, seed: int = 0) -> None:
    """The cache files of every shard, as a scan would write them."""
    rng = np.random.default_rng(seed)
    for index, count in enumerate(np.diff(np.linspace(0, records, SHARDS + 1).astype(np.int64))):
        per_record = rng.integers(1, 5, count)
        docs = rng.integers(20, 2000, int(per_record.sum())).astype(np.uint32)
        firsts = np.concatenate(([0], np.cumsum(per_record))).astype(np.int64)
        arrays = {
            "docs": docs,
            "firsts": firsts,
            "offsets": lengths.record_offsets(docs, firsts),
            "lead": np.zeros(count, np.int32),
            "before": np.full(count, -1, np.int32),
        }
        lengths.write_entry(lengths.entry_prefix(_shard(index, 0).sha256, EOT_ID, "uint16"), arrays)


def _resident_mb() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS")) / 1024


def open_split(records: int) -> lengths.SplitLengths:
    counts = np.diff(np.linspace(0, records, SHARDS + 1).astype(np.int64))
    shards = [_shard(i, int(n)) for i, n in enumerate(counts)]
    prefixes = [lengths.entry_prefix(s.sha256, EOT_ID, "uint16") for s in shards]
    return lengths.SplitLengths.of_shards(
        shards, [lengths.read_entry(p) for p in prefixes], prefixes
    )


def digest_seconds() -> tuple[float, int]:
    """Seconds to hash every array file of the cache as opening an entry checks it, and their
    bytes."""
    paths = [
        os.path.join(root, f)
        for root, _, files in os.walk(lengths.cache_dir())
        for f in files
        if f.endswith(".npy")
    ]
    start = time.perf_counter()
    for path in paths:
        lengths.file_digest(path)
    return time.perf_counter() - start, sum(os.path.getsize(p) for p in paths)


def measure(records: int, packing: str, steps: int, rows: int, unchecked: bool) -> None:
    if unchecked:  # the reference: each file mapped as it is, no digest read or compared
        lengths._checked_load = lambda prefix, name, digest: lengths._load(f"{prefix}-{name}.npy")
    checking, checked = digest_seconds()  # the cache's pages are in the page cache: a warm start
    before = _resident_mb()
    start = time.perf_counter()
    split = open_split(records)
    planner = Planner(
        [split], stages=[Stage(0, (1.0,))], seed=0, seq_len=1024, rows=rows, packing=packing
    )
    planner.plan(Position.start(1))
    opened = time.perf_counter() - start
    opened_mb = _resident_mb()
    # Step 10^6, half way through the second epoch: an epoch draws each window (concat) or unit
    # once.
    per_epoch = split.offsets()[1][-1] // 1025 if packing == "concat" else split.units(1024)[1][-1]
    far = Position(10**6, (int(per_epoch) * 3 // 2,), (0,), (0,))
    start = time.perf_counter()
    planner.plan(far)
    resumed = time.perf_counter() - start
    start = time.perf_counter()
    position = far
    for _ in range(steps):
        _, position = planner.plan(position)
    per_step = (time.perf_counter() - start) / steps
    on_disk = sum(
        os.path.getsize(os.path.join(root, f))
        for root, _, files in os.walk(lengths.cache_dir())
        for f in files
    )
    documents = sum(map(len, split.docs))
    print(
        f"{records:,} records ({documents:,} documents) in {SHARDS} shards, {packing} packing, "
        f"global batch {rows} x 1024{' (reference: entries unchecked)' if unchecked else ''}"
    )
    print(
        f"lengths cache on disk:           {on_disk / 2**20:,.0f} MiB ({on_disk / records:.1f} "
        "bytes per record)"
    )
    print(
        f"start-up (open + first plan):    {opened * 1e3:,.1f} ms, resident "
        f"+{opened_mb - before:,.1f} MiB"
    )
    if not unchecked:
        print(
            f"  of which checking the digests: {checking * 1e3:,.1f} ms ({checked / 2**20:,.0f} "
            f"MiB hashed, {checked / 2**30 / checking:,.1f} GiB/s)"
        )
    print(f"resume at step 10^6 (one plan):  {resumed * 1e3:,.2f} ms")
    print(
        f"planning a step, steady:         {per_step * 1e3:,.3f} ms over {steps} steps "
        f"(resident +{_resident_mb() - before:,.1f} MiB after)"
    )


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--records", type=int, default=10_000_000)
    parser.add_argument("--packing", choices=("concat", "document"), default="document")
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument(
        "--rows", type=int, default=16, help="global batch size (rows the plan fills per step)"
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=0,
        help="also measure this many times each, alternating, opening with the digest checks and "
        "a reference without them (default: once, with them)",
    )
    parser.add_argument("--measure", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--unchecked", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        measure(args.records, args.packing, args.steps, args.rows, args.unchecked)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        os.environ[lengths.CACHE_ENV] = tmp
        write_cache(args.records)
        if args.packing == "document":
            start = time.perf_counter()
            open_split(args.records).units(1024)
            print(
                "document packing's units, derived once per machine and seq_len: "
                f"{time.perf_counter() - start:,.1f} s",
                flush=True,
            )
        # A fresh process each: its memory holds what a training host's would, not the arrays
        # just written.
        runs = [[]] if not args.rounds else [[], ["--unchecked"]] * args.rounds
        for extra in runs:
            measured = subprocess.run(
                [sys.executable, __file__, "--measure", *sys.argv[1:], *extra]
            )
            if measured.returncode:
                return measured.returncode
        return 0


if __name__ == "__main__":
    sys.exit(main())
