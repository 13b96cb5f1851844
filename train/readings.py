"""Reading the metrics of checked steps once the device is past them.

A checked step is one that is logged, checkpointed, or the first of a (re)start. Its metrics (loss,
gradient norm, and the processes' reports on what they fed) stay on the device until a later step
is queued; reading them then costs the device no idle time.
"""

from __future__ import annotations

import time

import jax
import numpy as np

from train.config import TrainConfig
from train.host_batches import settle
from train.metrics import peak_flops
from train.step import learning_rate


class Readings:
    """Checked steps (logged, checkpointed, or the first) whose metrics are still on the device.

    `read` takes them in order once a later step is queued, so the host waits for a step the
    device has finished or is finishing while the next one runs: it never idles the device. Each
    reading settles what the processes fed (their agreement, the mixture's tokens, the batch digest)
    from the reports that came back with the step.
    """

    def __init__(self, config: TrainConfig, tokens_before: np.ndarray, start: int):
        self._config = config
        self._tokens_before = tokens_before
        self._pending: list[tuple[int, bool, dict[str, jax.Array]]] = []
        self._clock, self._clock_step = time.perf_counter(), start
        peak = peak_flops(jax.devices()[0].device_kind)
        # Model FLOPs per token over the peak of all devices: MFU per token/s, where the peak is
        # known.
        self._mfu_per_token = (
            config.model.flops_per_token(config.seq_len) / (peak * jax.device_count())
            if peak
            else None
        )
        self.source_tokens = tokens_before
        # (step, loss, gradient norm) of the first step found not finite; nothing is read past it.
        self.diverged: tuple[int, float, float] | None = None

    def add(self, step: int, logged: bool, metrics: dict[str, jax.Array]) -> None:
        self._pending.append((step, logged, metrics))

    def read(self, *, through: int) -> list[dict]:
        """Reads every pending step up to `through`, waiting for the device as needed; returns the
        metrics rows of the logged ones. Stops at a step whose health says a step up to it was not
        finite, and records that step in `diverged`."""
        config, rows = self._config, []
        while self._pending and self._pending[0][0] <= through and not self.diverged:
            step, logged, metrics = self._pending.pop(0)
            values = jax.device_get(metrics)
            health = values["health"]
            if int(health["step"]):  # this step or one before it, read or not, went non-finite
                self.diverged = (
                    int(health["step"]),
                    float(health["loss"]),
                    float(health["grad_norm"]),
                )
                break
            reports = np.ascontiguousarray(values["reports"]).view("<i8")
            fed_tokens, digest = settle(reports, len(config.data), step=step)
            self.source_tokens = self._tokens_before + fed_tokens
            if not logged:
                continue
            now = time.perf_counter()  # the step is done: the time since the last reading is real
            tokens_per_s = (
                config.batch_size * config.seq_len * (step - self._clock_step) / (now - self._clock)
            )
            self._clock, self._clock_step = now, step
            row = {
                "step": step,
                "loss": float(values["loss"]),
                "lr": float(learning_rate(config, step - 1)),
                "grad_norm": float(values["grad_norm"]),
                "tokens_per_s": tokens_per_s,
                "batch_sha256": digest,
            }
            if self._mfu_per_token:
                row["mfu"] = self._mfu_per_token * tokens_per_s
            if len(config.data) > 1:
                shares = self.source_tokens / max(int(self.source_tokens.sum()), 1)
                row.update(
                    {
                        f"source_share/{name}": float(x)
                        for name, x in zip(config.source_names, shares)
                    }
                )
            rows.append(row)
        return rows

    def restart_clock(self, step: int) -> None:
        """After an evaluation: its time is not training throughput."""
        self._clock, self._clock_step = time.perf_counter(), step
