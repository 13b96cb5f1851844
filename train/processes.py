"""What the processes of a run tell each other: small integer vectors, and one error for all.

A refusal on one process alone would leave the others waiting in their next collective, so
checks that can fail differently per process run through `agreed`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import TypeVar

import numpy as np
from jax.experimental import multihost_utils

from train.errors import TrainError, TrainUsageError

T = TypeVar("T")
# Errors travel as fixed-size byte buffers (every process must send the same shape).
_MESSAGE_BYTES = 4096
# An error of another process is raised here as the trainer's error of its status.
_KINDS = {kind.exit_status: kind for kind in (TrainUsageError, TrainError)}


def gather_int64(values: np.ndarray | list[int]) -> np.ndarray:
    """[processes, n]: every process's `values` (the same length on each), exactly.

    Sent as pairs of uint32: JAX without x64 would narrow int64 to int32.
    """
    host = np.ascontiguousarray(values, dtype="<i8").reshape(-1)
    gathered = multihost_utils.process_allgather(host.view("<u4"))
    return np.ascontiguousarray(gathered, dtype="<u4").view("<i8")


def _encode(message: str) -> np.ndarray:
    data = message.encode()[:_MESSAGE_BYTES].ljust(_MESSAGE_BYTES, b"\0")
    return np.frombuffer(data, dtype="<i8")


def _decode(row: np.ndarray) -> str:
    return np.ascontiguousarray(row, dtype="<i8").tobytes().rstrip(b"\0").decode(errors="replace")


def agreed(fn: Callable[[], T]) -> T:
    """`fn()` on every process; if it raises a ValueError on any, all raise the first one's error:
    that process its own, the others one of the same kind (a usage or a run error, or a bug) and
    message.

    Every process must call it at the same point (it is a collective).
    """
    try:
        result, error, message = fn(), None, ""
    except ValueError as e:
        result, error = None, e
        message = f"{getattr(e, 'exit_status', 0)} {str(e) or type(e).__name__}"
    errors = [text for text in map(_decode, gather_int64(_encode(message))) if text]
    if not errors:
        return result
    if error is not None and errors[0] == message:
        raise error
    status, _, text = errors[0].partition(" ")
    raise _KINDS.get(int(status), ValueError)(text)


def check_same_everywhere(text: str, what: str) -> None:
    """Refuses, on every process, a `text` that is not the same on all of them."""
    digests = gather_int64(np.frombuffer(hashlib.sha256(text.encode()).digest(), dtype="<i8"))
    differing = [i for i, row in enumerate(digests) if not np.array_equal(row, digests[0])]
    if differing:
        raise TrainUsageError(
            f"processes 0 and {differing[0]} were started with different {what}; give every "
            "process the same flags"
        )
