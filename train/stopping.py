"""How a run stops before its last step: a loss gone non-finite, a checkpoint that cannot be
written, a preemption notice (SIGTERM), an interrupt (Ctrl-C, `pipeline/cli/interrupts.py`).

SIGTERM is what a preempted cloud VM, Kubernetes and Slurm send before they kill a process. The
command records it (`record_preemption`) and the loop asks at every step (`preemption_requested`):
it saves a checkpoint of the last step it ran and ends with `Preempted`, so that the same command
run again resumes where it stopped. In a multi-process run JAX's preemption service takes SIGTERM
instead, and every process stops at the same step, the one its sync point names.
"""

from __future__ import annotations

import re
import signal
import threading
from collections.abc import Sequence

from pipeline.cli import interrupts
from schemas.errors import RunError, UserError

# The exit status of a run stopped by SIGTERM: 128 + 15, as a shell reports a process it ended.
PREEMPTED_STATUS = 128 + signal.SIGTERM

_notice = threading.Event()


class Diverged(RunError):
    """A step's loss or gradient norm was not finite: the run stops there; the checkpoints it
    wrote before hold the last good state."""

    def __init__(self, step: int, loss: float, grad_norm: float, last_checkpoint: int | None):
        kept = (
            f"the checkpoint of step {last_checkpoint} is the last good state"
            if last_checkpoint
            else "no checkpoint was written"
        )
        super().__init__(
            f"step {step}: the loss is {loss:.4g} and the gradient norm {grad_norm:.4g}: training "
            f"diverged and stops here; {kept} (a lower --learning-rate may help)"
        )


class CheckpointError(RunError):
    """A checkpoint could not be written: the run stops; the checkpoints before it are whole. What
    the failed save wrote is `removed` (its space given back, which the line says: on a full disk
    it is what the user is short of); `left` names what could not be."""

    def __init__(
        self,
        step: int | None,
        directory: str,
        error: BaseException,
        *,
        removed: bool = False,
        left: Sequence[str] = (),
    ):
        what = "checkpoints" if step is None else f"the checkpoint of step {step}"
        after = ""
        if left:
            after = f"; its partial files are left in {', '.join(left)}"
        elif removed:
            after = "; its partial files are removed, their space given back"
        super().__init__(f"cannot write {what} to {directory}: {_reason(error)}{after}")


def _reason(error: BaseException) -> str:
    """What went wrong, without the store's own wording around it: the OS error where there is one
    (TensorStore ends its message with it: `...: No space left on device [os_error_code='28']`)."""
    if isinstance(error, OSError) and error.strerror:
        return f"{error.strerror} ({error.filename})" if error.filename else error.strerror
    found = re.search(r": ([^:]+?) \[os_error_code='\d+'\]", str(error))
    return found.group(1) if found else str(error).splitlines()[0]


class Preempted(UserError):
    """SIGTERM stopped the run; `saved` is the step of the checkpoint written on the way out. No
    failure: the runner tells it as `train: stopped by SIGTERM: ...`, with status 143."""

    exit_status = PREEMPTED_STATUS
    failure = False

    def __init__(self, *, saved: int | None, latest: int | None):
        if saved:
            what = f"the checkpoint of step {saved} is saved"
        elif latest:
            what = f"nothing new to save since the checkpoint of step {latest}"
        else:
            what = "no step was trained, nothing to save"
        super().__init__(f"stopped by SIGTERM: {what}; run the same command again to resume")


def record_preemption() -> None:
    """From now on, in this process, SIGTERM is recorded for the loop to act on instead of ending
    the process (in the main thread; JAX's preemption service replaces it in a multi-process
    run)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, lambda signum, frame: _notice.set())


def preemption_noticed() -> bool:
    """Whether SIGTERM came to this process (before the loop: stop without training a step)."""
    return _notice.is_set()


def preemption_requested(step: int) -> bool:
    """Whether the run should save and stop after `step`, called before it runs: SIGTERM came to
    this process, or, in a multi-process run, all processes reached the step JAX's preemption
    service agreed on. Every process calls it at every step."""
    # Imported here: the command records SIGTERM before JAX is imported.
    from jax.experimental import multihost_utils

    return _notice.is_set() or multihost_utils.reached_preemption_sync_point(step)


def check_interrupted() -> None:
    """Raises the KeyboardInterrupt of a Ctrl-C that landed where Python could not raise it (a
    finalizer, JAX's garbage-collector callback), so that it stops the run all the same."""
    if interrupts.received():
        raise KeyboardInterrupt
