"""What the cleaning stage costs and finds: `prepare` plain, with `--dedup exact` and with
`--dedup near`, on one corpus with planted exact and near duplicates, in one run.

The corpus (tests/support/planted.py) holds distinct documents of random made-up words and, after \
them in
input order, exact copies and near copies (a few words replaced) of random earlier ones. Reported:
each run's wall time (the whole `python -m pipeline prepare` process, on every core) and its ratio \
to
the plain run's, and the precision and recall of `near` against the planted duplicates (exact and
near together: a removal is right when the planted corpus says the document copies an earlier one).

Usage: python benchmarks/dedup.py [--megabytes 64] [--workdir /tmp/dedup_bench] [--check]

`--check` exits non-zero when exact dedup adds more than 15%, near dedup more than 100%, or near's
precision or recall is below 0.95.
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
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.join(REPO, "tests"))  # the planted corpus the cleaning tests use too

from support.planted import PlantedCorpus, planted_corpus  # noqa: E402

BYTES_PER_DOCUMENT = 2300  # measured for 300 words on average; only sizes the corpus
GOALS = {"exact": 1.15, "near": 2.0}
MIN_PRECISION_RECALL = 0.95


def make_corpus(path: str, megabytes: int) -> PlantedCorpus:
    corpus = planted_corpus(
        int(megabytes * 2**20 / BYTES_PER_DOCUMENT / 1.2), words=300, changes=3, seed=7
    )
    with open(path, "w") as f:
        f.writelines(json.dumps({"text": d}) + "\n" for d in corpus.documents)
    return corpus


def prepare(corpus: str, output: str, *flags: str) -> float:
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
    return time.perf_counter() - started


def precision_recall(output: str, corpus: PlantedCorpus) -> tuple[float, float]:
    with open(os.path.join(output, "removals.jsonl")) as f:
        removed = {
            json.loads(line)["line"] - 1 for line in f
        }  # one document a line, numbered from 1
    planted = set(corpus.exact) | set(corpus.near)
    right = len(removed & planted)
    return right / max(len(removed), 1), right / max(len(planted), 1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--megabytes", type=int, default=64)
    parser.add_argument("--workdir", default="/tmp/dedup_bench")
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args(argv)
    os.makedirs(args.workdir, exist_ok=True)
    path = os.path.join(args.workdir, "planted.jsonl")
    corpus = make_corpus(path, args.megabytes)
    print(
        f"corpus: {os.path.getsize(path) / 2**20:.1f} MiB, {len(corpus.documents)} documents, "
        f"{len(corpus.exact)} exact and {len(corpus.near)} near copies planted; {os.cpu_count()} "
        "cores"
    )
    out = os.path.join(args.workdir, "out")
    seconds = {"plain": prepare(path, out)}
    for mode in ("exact", "near"):
        seconds[mode] = prepare(path, out, "--dedup", mode)
        with open(os.path.join(out, "run_info.json")) as f:
            cleaning = json.load(f)["cleaning_seconds"]
        print(
            f"{mode}: {seconds[mode]:.1f} s vs plain {seconds['plain']:.1f} s: "
            f"x{seconds[mode] / seconds['plain']:.2f} (cleaning job {cleaning:.1f} s)"
        )
    precision, recall = precision_recall(out, corpus)
    print(f"near: precision {precision:.4f}, recall {recall:.4f} against the planted duplicates")
    failed = [m for m, goal in GOALS.items() if seconds[m] / seconds["plain"] > goal]
    if min(precision, recall) < MIN_PRECISION_RECALL:
        failed.append("near precision/recall")
    if failed:
        print(f"below goal: {', '.join(failed)}")
    return 1 if args.check and failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
