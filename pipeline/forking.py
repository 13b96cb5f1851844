"""Work done in a forked child while this process goes on, where forking is safe.

A fork copies the whole process, so a child starts at once with everything already loaded (a parsed
`tokenizer.json`, Beam), but it is safe only while no other Python thread runs (a thread holding a
lock at the fork holds it forever in the child) and JAX has not started its runtime (JAX itself
warns then). prepare's launcher is such a process; a trainer or a Beam worker may not be, and there
the work runs in this process instead, with the same result.

It lives in `pipeline/` itself: tokenizer loading (`tokenization/`) and prepare's local job
(`prepare/execution/watch.py`) both fork.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import multiprocessing.connection
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from typing import TypeVar

T = TypeVar("T")

_PR_SET_PDEATHSIG = 1


def fork_is_safe() -> bool:
    """Whether a fork now gives a sound child: this thread alone, and JAX's runtime not started."""
    xla = sys.modules.get("jax._src.xla_bridge")
    return threading.active_count() == 1 and not (xla and xla.backends_are_initialized())


def die_with_parent() -> None:
    """Linux: the kernel kills this process when its parent dies, however the parent dies."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass  # elsewhere an orphan finishes what it holds, then finds its pipes closed


def _run_child(work: Callable[[], object], send: multiprocessing.connection.Connection) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent acts on Ctrl-C; this ends soon
    try:
        send.send(work())
    finally:
        os._exit(0)  # never return into the parent's code


@contextlib.contextmanager
def in_child(work: Callable[[], T]) -> Iterator[Callable[[], T]]:
    """Starts `work` in a forked child, and yields what waits for its result (a picklable value,
    worked out once however often it is asked for). Where forking is unsafe, or the child ends
    without a result (`work` raised), `work` runs in this process: the caller gets its value or its
    exception either way. The child does not outlive the block."""
    if not fork_is_safe():
        yield functools.cache(work)
        return
    receive, send = multiprocessing.Pipe(duplex=False)
    pid = os.fork()
    if pid == 0:
        receive.close()
        _run_child(work, send)
    send.close()

    @functools.cache
    def result() -> T:
        try:
            return receive.recv()
        except EOFError:
            return work()

    try:
        yield result
    finally:
        receive.close()
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)  # gone already when its result was read
        os.waitpid(pid, 0)
