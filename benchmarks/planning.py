"""What planning costs the launcher, and what the shape of the input costs a worker's memory.

For the same corpus as 1, 10 and 100 text files, and for one separator-free file (a single
document the size of the file), this measures the bytes the planning process reads (Linux
`/proc/self/io`, in a fresh process) and its time, against the reference a launcher that
fingerprints its inputs by content would pay: one SHA-256 pass over every byte, measured in the
same run. The separator-free file is then prepared for real, and the peak resident memory of its
worker processes is read from the run's `run_info.json`.

    python benchmarks/planning.py [--megabytes 400] [--separator-free-megabytes 1024] [--check]

`--check` exits non-zero when planning reads 10% of its input or more, or a worker's peak resident
memory reaches 2 GiB.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from pipeline.corpus import write_corpus  # noqa: E402

STORIES_PER_MB = 3400  # the generator's output per MiB; only sizes the corpus
BLOCK_MB = 16
MAX_READ_FRACTION = 0.10
MAX_WORKER_RSS = 2 * 2**30

_MEASURE = """
import json, sys, time
from pipeline.prepare.planning import make_plan
from schemas.prepare_config import PrepareConfig
def rchar():
    with open("/proc/self/io") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("rchar:"))
# imports and the tokenizer, outside the count
make_plan(["/dev/null"], PrepareConfig(format="text"))
before, start = rchar(), time.perf_counter()
plan = make_plan(sys.argv[1:], PrepareConfig())
print(json.dumps({"seconds": time.perf_counter() - start, "bytes_read": rchar() - before,
                  "units": len(plan.units)}))
"""


def block(workdir: str) -> bytes:
    path = os.path.join(workdir, "block.txt")
    if not os.path.exists(path):
        write_corpus(path, BLOCK_MB * STORIES_PER_MB, seed=1)
    with open(path, "rb") as f:
        return f.read()


def write_files(directory: str, count: int, megabytes: int, data: bytes) -> list[str]:
    """`count` files adding up to about `megabytes`, made of copies of `data`."""
    os.makedirs(directory, exist_ok=True)
    per_file = megabytes * 2**20 // count
    paths = []
    for i in range(count):
        path = os.path.join(directory, f"part-{i:03d}.txt")
        if not os.path.exists(path) or os.path.getsize(path) < per_file:
            with open(path, "wb") as f:
                written = 0
                while written < per_file:
                    f.write(data[: per_file - written])
                    written += min(len(data), per_file - written)
        paths.append(path)
    return paths


def separator_free(workdir: str, megabytes: int, data: bytes) -> str:
    """A file with no separator line: the stories' text run together into one document."""
    path = os.path.join(workdir, "separator_free.txt")
    text = data.replace(b"\n<|endoftext|>\n", b"\n\n")
    if not os.path.exists(path) or os.path.getsize(path) < megabytes * 2**20:
        write_files(workdir, 1, megabytes, text)
        os.replace(os.path.join(workdir, "part-000.txt"), path)
    return path


def planning(paths: list[str]) -> dict:
    result = subprocess.run(
        [sys.executable, "-c", _MEASURE, *paths],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(result.stdout)


def hashing_seconds(paths: list[str]) -> float:
    start = time.perf_counter()
    for path in paths:
        with open(path, "rb") as f:
            hashlib.file_digest(f, "sha256")
    return time.perf_counter() - start


def prepare_peak_rss(path: str, output: str) -> dict:
    shutil.rmtree(output, ignore_errors=True)
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "pipeline", "prepare", "--input", path, "--output", output],
        cwd=REPO,
        check=True,
        stderr=subprocess.DEVNULL,
    )
    seconds = time.perf_counter() - start
    with open(os.path.join(output, "run_info.json")) as f:
        info = json.load(f)
    with open(os.path.join(output, "manifest.json")) as f:
        manifest = json.load(f)
    return {
        "seconds": seconds,
        "worker_rss": info["workers_peak_rss_bytes"],
        "launcher_rss": info["launcher_peak_rss_bytes"],
        "counts": manifest["counts"],
        "tokens": sum(t["tokens"] for t in manifest["totals"].values()),
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--megabytes", type=int, default=400)
    parser.add_argument("--separator-free-megabytes", type=int, default=1024)
    parser.add_argument("--workdir", default="/tmp/planning_bench")
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    data = block(args.workdir)
    layouts = {
        f"{n} files": write_files(os.path.join(args.workdir, f"x{n}"), n, args.megabytes, data)
        for n in (1, 10, 100)
    }
    flat = separator_free(args.workdir, args.separator_free_megabytes, data)
    layouts["1 separator-free file"] = [flat]

    failures = []
    print(
        f"{'input':24} {'MiB':>7} {'units':>6} {'planning s':>11} {'read MiB':>9} "
        f"{'read share':>11} {'sha256 pass s':>14}"
    )
    for name, paths in layouts.items():
        size = sum(os.path.getsize(p) for p in paths)
        measured = planning(paths)
        share = measured["bytes_read"] / size
        print(
            f"{name:24} {size / 2**20:>7.0f} {measured['units']:>6} {measured['seconds']:>11.3f} "
            f"{measured['bytes_read'] / 2**20:>9.2f} {share:>10.3%} {hashing_seconds(paths):>14.2f}"
        )
        if share >= MAX_READ_FRACTION:
            failures.append(f"planning {name} read {share:.1%} of the input")
    run = prepare_peak_rss(flat, os.path.join(args.workdir, "separator_free_out"))
    print(
        f"\nprepare of the separator-free file: {run['tokens'] / 1e6:.1f}M tokens in "
        f"{run['seconds']:.1f} s; peak RSS of a worker process {run['worker_rss'] / 2**20:.0f} "
        f"MiB, of the launcher {run['launcher_rss'] / 2**20:.0f} MiB; counts {run['counts']}"
    )
    if run["worker_rss"] >= MAX_WORKER_RSS:
        failures.append(f"a worker's peak RSS was {run['worker_rss'] / 2**30:.2f} GiB")
    for failure in failures:
        print(f"below goal: {failure}", file=sys.stderr)
    return 1 if args.check and failures else 0


if __name__ == "__main__":
    sys.exit(main())
