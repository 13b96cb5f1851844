"""Metrics as JSON lines in the workdir and as TensorBoard event files, the loss curve drawn from
them, and the progress shown while training: a bar on a terminal, plain lines elsewhere."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from typing import TextIO

from tqdm import tqdm

from pipeline.cli.log_cadence import LogCadence, format_count, format_duration

METRICS_NAME = "metrics.jsonl"
PLOT_NAME = "loss.png"
# TensorBoard's log directory: event files, and jax.profiler's traces under plugins/profile/.
TENSORBOARD_DIR = "tensorboard"

# Peak dense bf16 FLOP/s per device, for MFU; unknown devices (CPUs) report no MFU.
PEAK_FLOPS = {
    "H100": 989e12,
    "H200": 989e12,
    "A100": 312e12,
    "TPU v4": 275e12,
    "TPU v5p": 459e12,
    "TPU v5 lite": 197e12,
}


def peak_flops(device_kind: str) -> float | None:
    return next((flops for name, flops in PEAK_FLOPS.items() if name in device_kind), None)


class MetricsLog:
    """Appends one JSON object per logged step. On resume, rows past the restored step (written
    after the last checkpoint by the run that stopped) are dropped, so every step appears once."""

    def __init__(self, workdir: str, resume_step: int):
        self.path = os.path.join(workdir, METRICS_NAME)
        rows = read_rows(self.path)
        kept = [r for r in rows if r["step"] <= resume_step]
        if len(kept) != len(rows):
            with open(self.path, "w") as f:
                f.writelines(json.dumps(r, sort_keys=True) + "\n" for r in kept)
        self._file = open(self.path, "a")

    def write(self, row: dict) -> None:
        self._file.write(json.dumps(row, sort_keys=True) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()


class TensorBoardLog:
    """Every metrics row's numbers as TensorBoard scalars, tagged by their `metrics.jsonl` names
    (`loss`, `lr`, `grad_norm`, `tokens_per_s`, `mfu`, `eval_loss`, `eval_loss/NAME`,
    `source_share/NAME`), written by tensorboardX (no TensorFlow).

    A resumed run starts its event file with TensorBoard's restart marker at the step after the
    checkpoint, so the rows the stopped run logged past it are dropped there too, as in
    `metrics.jsonl`.
    """

    def __init__(self, workdir: str, resume_step: int):
        from tensorboardX import SummaryWriter

        self.directory = os.path.join(workdir, TENSORBOARD_DIR)
        self._writer = SummaryWriter(
            self.directory, purge_step=resume_step + 1 if resume_step else None, flush_secs=10
        )

    def write(self, row: dict) -> None:
        for name, value in row.items():
            if name != "step" and isinstance(value, int | float):
                self._writer.add_scalar(name, value, row["step"])

    def close(self) -> None:
        self._writer.close()


def read_rows(path: str) -> list[dict]:
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def plot_losses(workdir: str) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = read_rows(os.path.join(workdir, METRICS_NAME))
    train = [(r["step"], r["loss"]) for r in rows if "loss" in r]
    evals = [(r["step"], r["eval_loss"]) for r in rows if "eval_loss" in r]
    fig, ax = plt.subplots(figsize=(7, 4))
    if train:
        ax.plot(*zip(*train), label="train loss", linewidth=1)
    if evals:
        ax.plot(*zip(*evals), "o-", label="eval loss")
    ax.set_xlabel("step")
    ax.set_ylabel("cross entropy (nats/token)")
    ax.grid(alpha=0.3)
    ax.legend()
    path = os.path.join(workdir, PLOT_NAME)
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return path


def progress_fields(row: dict, names: tuple[str, ...]) -> dict[str, str]:
    """A logged step's row as short fields: loss, learning rate, tokens/s and a mixture's shares."""
    fields = {
        "loss": f"{row['loss']:.3f}",
        "lr": f"{row['lr']:.2e}",
        "tokens/s": format_count(row["tokens_per_s"]),
    }
    if len(names) > 1:
        fields["mix"] = " ".join(f"{name} {row[f'source_share/{name}']:.2f}" for name in names)
    return fields


def progress_line(step: int, total: int, fields: dict[str, str]) -> str:
    return f"step {step}/{total} | " + " | ".join(
        f"{name} {value}" for name, value in fields.items()
    )


class PlainProgress:
    """Training progress off a terminal: a plain line for a logged step every 30 seconds or every
    tenth of the steps, whichever comes first, and for the last step (prepare's cadence and
    formats), with its metrics, the time so far and the ETA; and a line for every evaluation. A
    bar's carriage-return updates would reach a log file as one endless line."""

    def __init__(
        self,
        *,
        start: int,
        total: int,
        stream: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self._total = total
        self._stream = stream or sys.stderr
        self._clock = clock
        self._began = clock()
        self._first: tuple[int, float] | None = (
            None  # the first logged step: the rate leaves out compiling
        )
        self._cadence = LogCadence(total, done=start, now=self._began)

    def row(self, step: int, fields: dict[str, str]) -> None:
        """A logged step's metrics, as `progress_fields` gives them."""
        now = self._clock()
        first, at = self._first = self._first or (step, now)
        if self._cadence.due(step, now, final=step == self._total):
            eta = (
                format_duration((now - at) / (step - first) * (self._total - step))
                if step > first
                else "?"
            )
            self._line(step, {**fields, "elapsed": format_duration(now - self._began), "ETA": eta})

    def eval(self, step: int, fields: dict[str, str]) -> None:
        self._line(step, fields)

    def _line(self, step: int, fields: dict[str, str]) -> None:
        self._stream.write(progress_line(step, self._total, fields) + "\n")
        self._stream.flush()


class Display:
    """What the primary process shows: a bar on a terminal, plain lines elsewhere; nothing on
    others."""

    def __init__(self, *, start: int, total: int, names: tuple[str, ...], primary: bool):
        terminal = sys.stderr.isatty()
        self._names = names
        self._bar = tqdm(
            initial=start,
            total=total,
            disable=not (primary and terminal),
            unit="step",
            dynamic_ncols=True,
        )
        self._plain = PlainProgress(start=start, total=total) if primary and not terminal else None

    def note(self, text: str) -> None:
        if self._plain or not self._bar.disable:
            self._bar.write(f"train: {text}", file=sys.stderr)

    def row(self, row: dict) -> None:
        fields = progress_fields(row, self._names)
        self._bar.set_postfix(fields, refresh=False)
        if self._plain:
            self._plain.row(row["step"], fields)

    def evals(self, step: int, evals: dict[str, float]) -> None:
        fields = {name: f"{value:.4f}" for name, value in evals.items()}
        if self._plain:
            self._plain.eval(step, fields)
        elif not self._bar.disable:
            self._bar.write(progress_line(step, self._bar.total, fields), file=sys.stderr)

    def step(self) -> None:
        self._bar.update(1)

    def close(self) -> None:
        self._bar.close()
