"""What logging every step costs the training loop: `train()` at `--log-every 1` (the default)
against `--log-every 100`, in alternating rounds of the same run, no evaluation, checkpoints only
at the end.

The model is deliberately small (12 layers of width 32 by default): its step is short, so whatever
the loop does per step beyond dispatching it shows. Each run's time per step is taken from its own
metrics rows (each row's tokens/s covers the steps since the row before, as the loop clocks them
when it reads them), over the same window for both cadences: from the step-100 reading to the last
step, after compiling and warming up. The whole runs' wall times are printed too.

    python benchmarks/train_loop.py [--rounds 9] [--steps 200] [--layers 12] [--width 32] [--check]

The goal: the default cadence within 5% of the sparse one per step (`--check` exits 1 above it).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

import jax
import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.join(REPO, "tests"))  # `synthetic`: prepared sources from token ids

from model.config import GPTConfig  # noqa: E402
from support.synthetic import write_prepared  # noqa: E402
from train.config import TrainConfig  # noqa: E402
from train.metrics import METRICS_NAME, read_rows  # noqa: E402
from train.trainer import train  # noqa: E402

GOAL = 1.05
WARM = 100  # steps left out of the window: compiling, the first readings
VOCAB = 512


def _data(root: str) -> str:
    rng = np.random.default_rng(0)
    path = os.path.join(root, "data")
    write_prepared(
        path,
        {"train": [rng.integers(2, VOCAB, int(rng.integers(20, 400))) for _ in range(20_000)]},
        n_vocab=VOCAB,
    )
    return path


def seconds_per_step(workdir: str, tokens_per_step: int) -> float:
    """The loop's own clock over the steps after WARM, from the rows that cover them."""
    rows = [r for r in read_rows(os.path.join(workdir, METRICS_NAME)) if "loss" in r]
    seconds, previous = 0.0, None
    for row in rows:
        if previous is not None and previous >= WARM:
            seconds += tokens_per_step * (row["step"] - previous) / row["tokens_per_s"]
        previous = row["step"]
    return seconds / (rows[-1]["step"] - WARM)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--width", type=int, default=32)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--seq-len", type=int, default=64)
    parser.add_argument("--check", action="store_true", help=f"exit 1 if the ratio exceeds {GOAL}")
    args = parser.parse_args()
    if args.steps < 2 * WARM:
        parser.error(f"--steps must be at least {2 * WARM}")
    model = GPTConfig(
        vocab_size=VOCAB,
        max_seq_len=args.seq_len,
        num_layers=args.layers,
        num_heads=2,
        width=args.width,
        mlp_width=4 * args.width,
    )
    tokens_per_step = args.batch_size * args.seq_len
    cadences = {"--log-every 1": 1, "--log-every 100": 100}
    per_step: dict[str, list[float]] = {name: [] for name in cadences}
    wall: dict[str, list[float]] = {name: [] for name in cadences}
    with tempfile.TemporaryDirectory() as root:
        data = _data(root)

        def run(name: str, log_every: int, steps: int) -> str:
            workdir = os.path.join(root, f"run-{len(os.listdir(root))}")
            config = TrainConfig(
                data=data,
                workdir=workdir,
                model=model,
                steps=steps,
                batch_size=args.batch_size,
                seq_len=args.seq_len,
                warmup_steps=1,
                eval_batches=0,
                checkpoint_every=10**9,
                log_every=log_every,
            )
            began = time.perf_counter()
            train(config)
            wall[name].append(time.perf_counter() - began)
            return workdir

        for _ in range(args.rounds):
            for name, log_every in cadences.items():
                per_step[name].append(
                    seconds_per_step(run(name, log_every, args.steps), tokens_per_step)
                )
    dense, sparse = per_step["--log-every 1"], per_step["--log-every 100"]
    ratio = statistics.median(d / s for d, s in zip(dense, sparse))
    print(
        f"{jax.devices()[0].device_kind} x{jax.device_count()}, {os.cpu_count()} CPUs; "
        f"{args.layers} layers of width {args.width}, batch {args.batch_size} x {args.seq_len}; "
        f"{args.rounds} rounds of {args.steps} steps each, timed from step {WARM}"
    )
    print(f"{'cadence':18} {'ms/step (median)':>17} {'rounds':>40} {'whole runs (s)':>16}")
    for name in cadences:
        rounds = " ".join(f"{x * 1e3:.1f}" for x in per_step[name])
        print(
            f"{name:18} {statistics.median(per_step[name]) * 1e3:>17.2f} {rounds:>40} "
            f"{statistics.median(wall[name]):>16.1f}"
        )
    print(
        f"per step, --log-every 1 / --log-every 100: {ratio:.3f} (median of the rounds' ratios; "
        f"goal: at most {GOAL})"
    )
    if args.check and ratio > GOAL:
        sys.exit(1)


if __name__ == "__main__":
    main()
