"""Ctrl-C as a terminal sends it: SIGINT to the whole foreground process group.

Only the launcher acts on it. The job and its worker processes ignore SIGINT from the moment they
exist (`ignored_in_children`), so that none of them dies half-way through printing a traceback
(a Beam runner whose workers vanish fills the screen with gRPC errors); the launcher stops them
all when its KeyboardInterrupt unwinds. In the launcher an interrupt is also recorded, so that one
raised where Python cannot propagate it (inside a finalizer, `__del__`) still ends the run as
interrupted instead of being lost.
"""

from __future__ import annotations

import contextlib
import signal
import sys
from collections.abc import Iterator

_received = False
_deferred = False
_pending = False  # received while deferred: raised as the deferring block ends


def _raise(signum: int, frame: object) -> None:
    global _received, _pending
    _received = True
    if _deferred:
        _pending = True
    else:
        raise KeyboardInterrupt


def _unraisable(default):
    def hook(unraisable) -> None:
        if unraisable.exc_type is not None and issubclass(unraisable.exc_type, KeyboardInterrupt):
            return  # recorded by the handler; `received` reports it
        default(unraisable)

    hook.keeps_interrupts = True
    return hook


def install(*, deferred: bool = False) -> None:
    """In the command's process, before anything else: an interrupt raises KeyboardInterrupt and is
    remembered; one swallowed by a finalizer prints nothing. A process started with SIGINT ignored
    (a background job of a script) keeps ignoring it, as Python itself does. `deferred`: as if in
    `deferred()` until one ends."""
    global _deferred
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        return
    _deferred = _deferred or deferred
    signal.signal(signal.SIGINT, _raise)
    if not getattr(sys.unraisablehook, "keeps_interrupts", False):
        sys.unraisablehook = _unraisable(sys.unraisablehook)


def received() -> bool:
    return _received


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """Around imports of extension modules, and work that must not stop half-way (a checkpoint's
    save): an interrupt is only remembered, and raised once the block ends. One raised inside them
    breaks them in other ways than KeyboardInterrupt: numpy's import turns it into an ImportError,
    and jaxlib's, raising it through C++ code, aborts the process. One already raised before the
    block (a run winding down after Ctrl-C) is not raised again."""
    global _deferred, _pending
    _deferred = True
    try:
        yield
    finally:
        _deferred = False
    if _pending:
        _pending = False
        raise KeyboardInterrupt


def settle() -> None:
    """From here on the run's outcome is final: later interrupts are ignored."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@contextlib.contextmanager
def ignored_in_children() -> Iterator[None]:
    """Around starting a child process: SIGINT stays blocked in this thread until the child exists,
    so the child starts with it blocked and must call `ignore_here` first. An interrupt that comes
    meanwhile is delivered to this process once the block lifts."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def ignore_here() -> None:
    """First thing in a child started under `ignored_in_children`: ignore SIGINT (which discards one
    pending), then unblock it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
