"""A `jax.profiler` trace of a few training steps, as the miniGPT tutorial's profiling section takes
one: after warm-up (the first step of a start compiles), each step annotated, for TensorBoard's
profile plugin, XProf or Perfetto.
"""

from __future__ import annotations

import contextlib
import glob
import os

import jax

from train.metrics import TENSORBOARD_DIR


class StepProfile:
    """Traces steps `first` to `last` into WORKDIR/tensorboard/plugins/profile/RUN/ (an
    `.xplane.pb` per host, and `perfetto_trace.json.gz`); no steps when `steps` is 0.

    `around(step)` wraps everything the loop does for a step: inside the window it is a
    `StepTraceAnnotation`, which the profile plugin's step view splits the trace by. The trace stops
    once the last traced step has finished on the device, not when it was dispatched.
    """

    def __init__(self, workdir: str, *, start: int, skip: int, steps: int, last_step: int):
        self.directory = os.path.join(workdir, TENSORBOARD_DIR)
        self.first = start + 1 + skip
        self.last = min(self.first + steps - 1, last_step)
        self.path: str | None = None  # the trace's directory, once written
        self._tracing = False

    @property
    def wanted(self) -> bool:
        return self.first <= self.last

    def around(self, step: int) -> contextlib.AbstractContextManager:
        if step == self.first and self.wanted:
            jax.profiler.start_trace(self.directory, create_perfetto_trace=True)
            self._tracing = True
        if self._tracing:
            return jax.profiler.StepTraceAnnotation("train", step_num=step)
        return contextlib.nullcontext()

    def after(self, step: int, outputs) -> None:
        """After the loop's work for `step`: ends the trace at the last traced step."""
        if self._tracing and step == self.last:
            jax.block_until_ready(outputs)
            self.stop()

    def stop(self) -> None:
        """Ends a trace in progress (also when the run stops inside the window)."""
        if not self._tracing:
            return
        self._tracing = False
        jax.profiler.stop_trace()
        runs = sorted(
            glob.glob(os.path.join(self.directory, "plugins", "profile", "*")), key=os.path.getmtime
        )
        self.path = runs[-1] if runs else self.directory
