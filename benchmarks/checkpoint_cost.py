"""What an asynchronous checkpoint of a ~1.1 GB state (weights and AdamW moments, float32) costs the
training loop, against a synchronous save of the same state, in one run.

The trainer's step on a GPT-2-sized model (12 layers of width 768, a vocabulary of 8,600: 91.8M
parameters, 1.10 GB of state with the optimizer's), trained a few steps so the moments are not
zeros, then rounds of three cases in turn, each `--steps` steps long:

- none: the steps alone;
- background: `Checkpointer.save` writing in the background, as the trainer does on accelerators
  (the state copied off the device, the write started), the steps, and the wait for the write
  (what `close` or the next save waits);
- trainer: `Checkpointer.save` as the trainer does on this machine's devices (on CPU: written
  before it returns), then the steps;
- sync: Orbax saving the same state synchronously (`StandardCheckpointer`), then the steps.

A case's cost is its wall-clock time (and its process CPU time) less that of `none` in the same
round; `blocked` is how long the `save` call itself held the loop. On a CPU the background write
runs on the cores the step computes on, and costs the step more wall-clock time than its own CPU
time: XLA splits each op over every core and waits for the slowest part.

    python benchmarks/checkpoint_cost.py [--rounds 3] [--steps 20] [--check]

The goals: the trainer's checkpoint costs the loop no more wall-clock time than a synchronous save,
beyond the spread of the steps alone across rounds (the machine's own noise, which decides between
two synchronous saves on CPU), and on accelerators blocks it at most 1 s (`--check` exits 1
otherwise).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import tempfile
import time

import grain
import jax
import numpy as np
import orbax.checkpoint as ocp

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

import train.trainer as trainer  # noqa: E402
from model.config import GPTConfig  # noqa: E402
from train.checkpointing import Checkpointer, in_background  # noqa: E402
from train.config import TrainConfig  # noqa: E402
from train.mesh import global_batch  # noqa: E402
from train.step import Steps  # noqa: E402

GOAL_SECONDS = 1.0
VOCAB = 8600
MODEL = GPTConfig(
    vocab_size=VOCAB, max_seq_len=64, num_layers=12, num_heads=12, width=768, mlp_width=3072
)
BATCH, SEQ = 1, 16
CASES = ("none", "background", "trainer", "sync")


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument(
        "--check",
        action="store_true",
        help=f"exit 1 if a save blocks over {GOAL_SECONDS} s or costs more than a synchronous one "
        "beyond the rounds' noise",
    )
    args = parser.parse_args()
    config = TrainConfig(data="-", workdir="-", model=MODEL, seq_len=SEQ, batch_size=BATCH)
    mesh = trainer.make_mesh(())
    steps = Steps(*trainer.build(config, mesh))
    tokens = np.random.default_rng(0).integers(0, VOCAB, (BATCH, SEQ + 1)).astype(np.int32)
    # What the loader's position stands in for.
    position = iter(grain.MapDataset.range(8).to_iter_dataset())
    arrays, step = steps.arrays, 0
    wall: dict[str, list[float]] = {case: [] for case in CASES}
    cpu: dict[str, list[float]] = {case: [] for case in CASES}
    blocked: dict[str, list[float]] = {"background": [], "trainer": []}

    def run(count: int) -> None:
        nonlocal arrays, step
        for _ in range(count):
            step += 1
            arrays, metrics = steps.train(arrays, batch, jax.random.key(0), np.int32(step))
        jax.block_until_ready(metrics)

    with tempfile.TemporaryDirectory() as root, jax.set_mesh(mesh):
        batch = global_batch({"inputs": tokens[:, :-1], "targets": tokens[:, 1:]}, mesh)
        run(3)  # compiles; the moments are no longer zeros
        for round_ in range(args.rounds):
            for case in CASES:
                workdir = os.path.join(root, f"{case}-{round_}")
                checkpointer = None
                if case in ("background", "trainer"):
                    checkpointer = Checkpointer(
                        workdir, every=1, keep=1, background=True if case == "background" else None
                    )
                began, cpu_began = time.perf_counter(), _cpu_seconds()
                if checkpointer:
                    checkpointer.save(step, steps.state(arrays), position, {"source_tokens": {}})
                    blocked[case].append(time.perf_counter() - began)
                elif case == "sync":
                    writer = ocp.StandardCheckpointer()
                    writer.save(os.path.join(workdir, "state"), steps.state(arrays))
                    writer.wait_until_finished()
                    writer.close()
                run(args.steps)
                if checkpointer:
                    checkpointer.close()
                wall[case].append(time.perf_counter() - began)
                cpu[case].append(_cpu_seconds() - cpu_began)
    saving = CASES[1:]
    cost = {case: [w - n for w, n in zip(wall[case], wall["none"])] for case in saving}
    cpu_cost = {case: [c - n for c, n in zip(cpu[case], cpu["none"])] for case in saving}
    params = MODEL.num_params()
    print(
        f"{jax.devices()[0].device_kind} x{jax.device_count()}, {os.cpu_count()} CPUs, load "
        f"average {os.getloadavg()[0]:.1f}; {params / 1e6:.1f}M parameters, "
        f"{params * 12 / 1e9:.2f} GB of state; {args.rounds} rounds of {args.steps} steps per case"
    )
    print("steps alone: " + ", ".join(f"{x:.2f}" for x in wall["none"]) + " s")
    for case in saving:
        print(
            f"{case}: wall-clock cost "
            + ", ".join(f"{x:.2f}" for x in cost[case])
            + f" s, median {statistics.median(cost[case]):.2f} s; CPU "
            + ", ".join(f"{x:.2f}" for x in cpu_cost[case])
            + f" s, median {statistics.median(cpu_cost[case]):.2f} s"
            + (
                f"; blocked in save: median {statistics.median(blocked[case]):.2f} s"
                if case in blocked
                else ""
            )
        )
    ratios = {
        case: statistics.median(cost[case]) / statistics.median(cost["sync"])
        for case in ("background", "trainer")
    }
    # What the machine alone moved a case by: the spread of the steps alone across rounds. Two
    # costs closer than that are equal as far as this run can tell (on CPU the trainer's save is
    # itself a synchronous one).
    noise = max(wall["none"]) - min(wall["none"])
    excess = statistics.median(cost["trainer"]) - statistics.median(cost["sync"])
    print(
        f"wall-clock cost / synchronous save's: background {ratios['background']:.3f}, "
        f"the trainer's ({'in the background' if in_background() else 'written at once'}) "
        f"{ratios['trainer']:.3f}, {excess:+.2f} s against the rounds' own noise of {noise:.2f} s "
        "(goal: no dearer than that noise)"
    )
    if args.check and (
        excess > noise or (in_background() and max(blocked["trainer"]) > GOAL_SECONDS)
    ):
        sys.exit(1)


if __name__ == "__main__":
    main()
