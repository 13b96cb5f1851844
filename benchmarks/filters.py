"""What the quality filters cost: `prepare` plain, and with datatrove's filters at their default
rules, on one web-like corpus, in one run.

The corpus (tests/support/web_text.py) mixes prose with menus, boilerplate, repeated lines, code, \
bullets,
very short and long documents. Reported: each run's wall time (the whole `python -m pipeline
prepare` process, on every core), its ratio to the plain run's, the cleaning job's share and what
the filters removed. The runs alternate, `--rounds` times, and each configuration's best time is
compared, so a burst of other work on the machine does not decide the ratio.

Usage: python benchmarks/filters.py [--megabytes 32] [--rounds 2] [--workdir /tmp/filters_bench] \
[--check]

`--check` exits non-zero when the four filters together add more than 50% to plain prepare's time.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tests"))  # the web-like text the filter tests use too

from support.web_text import held_out_documents  # noqa: E402

ALL = "gopher-quality,gopher-repetition,c4,fineweb"
RUNS = {
    "plain": [],
    "gopher-quality": ["--filter", "gopher-quality"],
    "gopher-repetition": ["--filter", "gopher-repetition"],
    "c4": ["--filter", "c4"],
    "fineweb": ["--filter", "fineweb"],
    "all four": ["--filter", ALL],
}
GOAL = 1.5  # the four filters together, against plain prepare


def make_corpus(path: str, megabytes: int) -> int:
    written, seed = 0, 0
    with open(path, "w") as f:
        while written < megabytes * 2**20:
            for doc in held_out_documents(seed=seed, count=1100):
                line = json.dumps({"text": doc}) + "\n"
                f.write(line)
                written += len(line)
            seed += 1
    return seed * 1100


def prepare(corpus: str, output: str, *flags: str) -> tuple[float, dict]:
    shutil.rmtree(output, ignore_errors=True)
    started = time.perf_counter()
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pipeline",
            "prepare",
            "--input",
            corpus,
            "--output",
            output,
            *flags,
        ],
        cwd=REPO,
        check=True,
        stderr=subprocess.DEVNULL,
    )
    seconds = time.perf_counter() - started
    with open(os.path.join(output, "run_info.json")) as f:
        info = json.load(f)
    with open(os.path.join(output, "manifest.json")) as f:
        removed = json.load(f)["removed"]
    return seconds, {"cleaning_seconds": info["cleaning_seconds"], "removed": sum(removed.values())}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--megabytes", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--workdir", default="/tmp/filters_bench")
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args(argv)
    os.makedirs(args.workdir, exist_ok=True)
    path = os.path.join(args.workdir, "web.jsonl")
    documents = make_corpus(path, args.megabytes)
    print(
        f"corpus: {os.path.getsize(path) / 2**20:.1f} MiB, {documents} documents; {os.cpu_count()} "
        f"cores, best of {args.rounds} rounds"
    )
    out = os.path.join(args.workdir, "out")
    best: dict[str, float] = {}
    found: dict[str, dict] = {}
    for _ in range(args.rounds):
        for name, flags in RUNS.items():
            seconds, found[name] = prepare(path, out, *flags)
            best[name] = min(best.get(name, seconds), seconds)
    for name in RUNS:
        if name == "plain":
            print(f"plain: {best[name]:.1f} s")
            continue
        print(
            f"{name}: {best[name]:.1f} s, x{best[name] / best['plain']:.2f} of plain (cleaning job "
            f"{found[name]['cleaning_seconds']:.1f} s); removed {found[name]['removed']} of "
            f"{documents} documents"
        )
    ratio = best["all four"] / best["plain"]
    met = ratio <= GOAL
    print(
        f"all four filters add {100 * (ratio - 1):.0f}% to plain prepare (goal: at most "
        f"{100 * (GOAL - 1):.0f}%)" + ("" if met else ": below goal")
    )
    return 1 if args.check and not met else 0


if __name__ == "__main__":
    raise SystemExit(main())
