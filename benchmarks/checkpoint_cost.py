"""What a checkpoint of a ~1.1 GB model (weights and AdamW moments, float32) costs the training \
loop.

`train()` runs a GPT-2-sized model (12 layers of width 768, a vocabulary of 8,600: 91.8M parameters,
1.10 GB with the optimizer's state) on synthetic data, checkpointing every `--every` steps, and
the same run without checkpoints but the last, in alternating rounds. Measured in the same run:

- blocked: how long the loop waits in each checkpoint call (the state copied off the device, the
  write started in the background), timed around `Checkpointer.save`, and the part of it spent
  waiting for the checkpoint before to be written (checkpoints closer together than a save takes);
- loop time per checkpoint: the loop's own clock over the steps after the first, with checkpoints
  against without, divided by the checkpoints in between (on a machine whose cores the step keeps
  busy, the background write takes its CPU time from the step);
- the reference: the same state saved synchronously by Orbax, what a loop without asynchronous
  saves would wait.

    python benchmarks/checkpoint_cost.py [--rounds 2] [--steps 24] [--every 8] [--check]

The goal: each checkpoint blocks the loop at most 1 s (`--check` exits 1 above it).
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
import orbax.checkpoint as ocp

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.join(REPO, "tests"))  # `synthetic`: prepared sources from token ids

import train.trainer as trainer  # noqa: E402
from model.config import GPTConfig  # noqa: E402
from support.synthetic import write_prepared  # noqa: E402
from train.checkpointing import Checkpointer  # noqa: E402
from train.config import TrainConfig  # noqa: E402
from train.metrics import METRICS_NAME, read_rows  # noqa: E402
from train.step import Steps  # noqa: E402

GOAL_SECONDS = 1.0
VOCAB = 8600
MODEL = GPTConfig(
    vocab_size=VOCAB, max_seq_len=64, num_layers=12, num_heads=12, width=768, mlp_width=3072
)
BATCH, SEQ = 1, 16


class _TimedSaves:
    """Wraps `Checkpointer.save`: how long each call blocked the loop, and how much of that it
    waited for the checkpoint before to be written."""

    def __init__(self) -> None:
        self.blocked: list[float] = []
        self.waited: list[float] = []
        self._save = Checkpointer.save

    def __enter__(self) -> _TimedSaves:
        timed = self

        def save(checkpointer, *args, **kwargs):
            began = time.perf_counter()
            waited = timed._save(checkpointer, *args, **kwargs)
            timed.blocked.append(time.perf_counter() - began)
            timed.waited.append(waited)
            return waited

        Checkpointer.save = save
        return self

    def __exit__(self, *exc) -> None:
        Checkpointer.save = self._save


def _loop_seconds(workdir: str) -> float:
    """The loop's clock over every step after the first (which waited for compiling)."""
    rows = [r for r in read_rows(os.path.join(workdir, METRICS_NAME)) if "loss" in r]
    return sum(
        BATCH * SEQ * (b["step"] - a["step"]) / b["tokens_per_s"] for a, b in zip(rows, rows[1:])
    )


def _sync_save_seconds(root: str) -> float:
    """Orbax saving the same kind of state synchronously (a fresh model and optimizer of MODEL)."""
    config = TrainConfig(data="-", workdir="-", model=MODEL, seq_len=SEQ, batch_size=BATCH)
    mesh = trainer.make_mesh(())
    steps = Steps(*trainer.build(config, mesh))
    state = steps.state(steps.arrays)
    checkpointer = ocp.StandardCheckpointer()
    began = time.perf_counter()
    checkpointer.save(os.path.join(root, f"sync-{time.time_ns()}"), state)
    checkpointer.wait_until_finished()
    seconds = time.perf_counter() - began
    checkpointer.close()
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--steps", type=int, default=24)
    parser.add_argument("--every", type=int, default=8)
    parser.add_argument(
        "--check", action="store_true", help=f"exit 1 if a checkpoint blocks over {GOAL_SECONDS} s"
    )
    args = parser.parse_args()
    params = MODEL.num_params()
    inner = (args.steps - 1) // args.every  # checkpoints between the first step and the last
    loop_cost, sync = [], []
    with tempfile.TemporaryDirectory() as root, _TimedSaves() as saves:
        rng = np.random.default_rng(0)
        data = os.path.join(root, "data")
        write_prepared(
            data, {"train": [rng.integers(2, VOCAB, 300) for _ in range(2000)]}, n_vocab=VOCAB
        )

        def run(every: int) -> float:
            workdir = os.path.join(root, f"run-{time.time_ns()}")
            trainer.train(
                TrainConfig(
                    data=data,
                    workdir=workdir,
                    model=MODEL,
                    steps=args.steps,
                    batch_size=BATCH,
                    seq_len=SEQ,
                    warmup_steps=1,
                    eval_batches=0,
                    checkpoint_every=every,
                )
            )
            return _loop_seconds(workdir)

        for _ in range(args.rounds):
            with_checkpoints = run(args.every)
            blocked = len(saves.blocked)
            without = run(10**9)
            del (
                saves.blocked[blocked:],
                saves.waited[blocked:],
            )  # the last step's save of the run without checkpoints
            loop_cost.append((with_checkpoints - without) / inner)
            sync.append(_sync_save_seconds(root))
    print(
        f"{jax.devices()[0].device_kind} x{jax.device_count()}, {os.cpu_count()} CPUs; "
        f"{params / 1e6:.1f}M parameters, {params * 12 / 1e9:.2f} GB of state; {args.rounds} "
        f"rounds of {args.steps} steps, a checkpoint every {args.every} and at the last"
    )
    print(
        f"blocked in the checkpoint call: median {statistics.median(saves.blocked):.2f} s, "
        f"max {max(saves.blocked):.2f} s over {len(saves.blocked)} checkpoints, of which waiting "
        f"for the one before: max {max(saves.waited):.2f} s"
    )
    print(
        f"loop time per checkpoint (with - without, / {inner}): "
        + ", ".join(f"{x:.2f} s" for x in loop_cost)
    )
    print(f"Orbax saving the same state synchronously: median {statistics.median(sync):.2f} s")
    print(
        f"blocked / synchronous: {statistics.median(saves.blocked) / statistics.median(sync):.3f} "
        f"(goal: at most {GOAL_SECONDS} s blocked)"
    )
    if args.check and max(saves.blocked) > GOAL_SECONDS:
        sys.exit(1)


if __name__ == "__main__":
    main()
