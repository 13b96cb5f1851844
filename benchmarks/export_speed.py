"""`tokshards export` against `cp` of the same shards, and its peak memory, measured in one run.

A prepared directory of `--megabytes` of GPT-2 shards (synthetic ids, TinyStories-sized documents
of 50-400 tokens, records of the default 8192 tokens, 16 shards a split) is written first, by a
process of its own. Then, for `--rounds` rounds, a copy of its split directories (`cp -r`, then
`sync` of the copies: the export makes each file durable before it names it) and `python -m
pipeline export` of it alternate, each a process timed by the kernel: wall seconds, and CPU
seconds from `wait4`, which a shared machine's load moves far less. The export's start-up
(`export --help`: the interpreter, Beam's import), which does not grow with the data, is measured
in each round just before it and taken off its CPU seconds; the round with the median CPU ratio is
reported. Peak memory is the export process's maximum resident set: the shards are read a chunk
at a time, so it should not grow with the data.

Usage: python benchmarks/export_speed.py [--megabytes 256] [--format megatron] [--rounds 3]
       [--workdir /tmp/export_bench] [--check]

`--check` exits non-zero when the export, less its start-up, takes more than 12x the CPU seconds
of the copy, or its peak resident set passes 512 MiB.
"""

from __future__ import annotations

import argparse
import dataclasses
import multiprocessing
import os
import shutil
import subprocess
import sys
import time

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

GPT2_VOCAB, GPT2_EOT = 50257, 50256
CPU_RATIO_GOAL = 12.0
PEAK_RSS_GOAL = 512 * 2**20
SPLITS = ("train", "validation")


@dataclasses.dataclass(frozen=True)
class Timed:
    wall: float
    cpu: float
    peak_rss: int  # bytes


def timed(command: list[str]) -> Timed:
    """One process (and those it waited for): its wall and CPU seconds and peak resident set, as
    the kernel counted them."""
    started = time.perf_counter()
    process = subprocess.Popen(command, cwd=REPO, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - started
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode:
        raise SystemExit(f"{command[:4]} failed with status {process.returncode}")
    return Timed(wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss * 1024)


def make_dataset(path: str, megabytes: int) -> None:
    """Documents of 50-400 tokens, ids drawn at random, 2% of them validation. Run in a process of
    its own: a child's peak resident set counts its parent's memory until it runs its program."""
    sys.path[:0] = [REPO, os.path.join(REPO, "tests")]
    from support.synthetic import write_prepared

    rng = np.random.default_rng(0)
    tokens = megabytes * 2**20 // 2
    lengths = rng.integers(50, 400, size=tokens // 225)
    ids = rng.integers(0, GPT2_EOT, size=int(lengths.sum()), dtype=np.uint16)
    documents = np.split(ids, np.cumsum(lengths)[:-1])
    held = len(documents) // 50
    write_prepared(
        path,
        {"train": documents[held:], "validation": documents[:held]},
        n_vocab=GPT2_VOCAB,
        eot_id=GPT2_EOT,
        record_tokens=8192,
        num_shards=16,
    )


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--megabytes", type=int, default=256, help="tokens of the dataset, in MiB")
    p.add_argument("--format", default="megatron")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--workdir", default="/tmp/export_bench")
    p.add_argument("--check", action="store_true")
    args = p.parse_args()

    data = os.path.join(args.workdir, f"data_{args.megabytes}")
    if not os.path.exists(os.path.join(data, "manifest.json")):
        shutil.rmtree(data, ignore_errors=True)
        print(f"writing a {args.megabytes} MiB prepared directory to {data}", flush=True)
        maker = multiprocessing.get_context("spawn").Process(
            target=make_dataset, args=(data, args.megabytes)
        )
        maker.start()
        maker.join()
    shards = [os.path.join(data, s, n) for s in SPLITS for n in os.listdir(os.path.join(data, s))]
    copy, out = os.path.join(args.workdir, "copy"), os.path.join(args.workdir, "export")
    export = [sys.executable, "-m", "pipeline", "export", data, "--format", args.format]
    # The export makes each file durable (fsync) before it names it: the copy, timed with `sync`
    # of its files too, does as much.
    copy_and_sync = f"cp -r {data}/train {data}/validation {copy} && sync {copy}/*/*"

    rounds = []
    for _ in range(args.rounds):
        shutil.rmtree(copy, ignore_errors=True)
        os.makedirs(copy)
        cp = timed(["sh", "-c", copy_and_sync])
        shutil.rmtree(out, ignore_errors=True)
        startup = timed([*export, "--help"]).cpu
        exported = timed([*export, "--output", out])
        rounds.append((cp, exported, startup, (exported.cpu - startup) / cp.cpu))
    cp, exported, startup, ratio = sorted(rounds, key=lambda r: r[3])[len(rounds) // 2]
    peak = max(r[1].peak_rss for r in rounds)

    size = sum(os.path.getsize(s) for s in shards)
    print(f"{size / 2**20:.0f} MiB of shards, export --format {args.format}")
    print(f"cp -r + sync: {cp.wall:.2f} s wall, {cp.cpu:.2f} CPU-s")
    print(
        f"export: {exported.wall:.2f} s wall, {exported.cpu:.2f} CPU-s, of which start-up "
        f"{startup:.2f} CPU-s; peak RSS {peak / 2**20:.0f} MiB"
    )
    print(
        f"export / cp (the median of {args.rounds} rounds): {exported.wall / cp.wall:.1f}x wall, "
        f"{ratio:.2f}x CPU beyond start-up (rounds: "
        + ", ".join(f"{r[3]:.2f}" for r in rounds)
        + ")"
    )
    failures = []
    if ratio > CPU_RATIO_GOAL:
        failures.append(f"export took {ratio:.2f}x the CPU of cp beyond its start-up")
    if peak > PEAK_RSS_GOAL:
        failures.append(f"export's peak RSS was {peak / 2**20:.0f} MiB")
    if args.check and failures:
        print("FAIL: " + "; ".join(failures), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
