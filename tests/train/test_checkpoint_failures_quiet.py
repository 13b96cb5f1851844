"""A failed save reaches the user as the run's one line alone: the errors Orbax's writes log about
it are left out, also asyncio's for futures collected after the run printed that line, while other
errors are still logged."""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import sys

import pytest

from train import checkpointing

ORBAX_WRITE = os.path.join(os.sep, "site-packages", "orbax", "checkpoint", "serialization.py")


def _raised_in(filename: str) -> ValueError:
    """An exception whose traceback passes through `filename`, as TensorStore's write errors pass
    through Orbax's serialization."""
    try:
        exec(compile("raise ValueError('No space left on device')", filename, "exec"))
    except ValueError as e:
        return e
    raise AssertionError("unreachable")


def _collected_unretrieved(error: Exception) -> None:
    """A future that failed with `error` and that nobody awaited, collected: asyncio logs
    `Future exception was never retrieved`, as it does for a failed save's gathered writes."""
    loop = asyncio.new_event_loop()
    try:
        future = loop.create_future()
        future.set_exception(error)
        del future
        gc.collect(0)  # the future is young: no need to walk the test session's whole heap
    finally:
        loop.close()


def _logged(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage().splitlines()[0] for r in caplog.records if r.name in ("asyncio", "absl")]


@pytest.fixture
def after_failure():
    """`_quiet_failed_writes_from_now_on` lasts for the process: undone after the test."""
    hook = sys.unraisablehook
    yield
    sys.unraisablehook = hook
    for name in checkpointing._OrbaxFailures.LOGGERS:
        logging.getLogger(name).removeFilter(checkpointing._AFTER_FAILURE)


def _logged_by_orbax(message: str) -> None:
    """An error Orbax's own code logs through absl."""
    exec(compile(f"logging.getLogger('absl').error({message!r})", ORBAX_WRITE, "exec"))


def test_while_saving_only_errors_of_orbax_are_left_out(caplog):
    elsewhere = os.path.join(os.sep, "elsewhere", "code.py")
    with checkpointing._quiet_failures():
        _collected_unretrieved(_raised_in(ORBAX_WRITE))
        _logged_by_orbax("a background save failed")
        assert _logged(caplog) == []
        logging.getLogger("absl").error("not Orbax's")
        _collected_unretrieved(_raised_in(elsewhere))
        assert _logged(caplog) == ["not Orbax's", "Future exception was never retrieved"]
    caplog.clear()
    _collected_unretrieved(_raised_in(ORBAX_WRITE))
    _logged_by_orbax("a background save failed")
    assert _logged(caplog) == ["Future exception was never retrieved", "a background save failed"]


def test_after_a_failed_save_its_unretrieved_writes_stay_quiet(caplog, after_failure):
    checkpointing._quiet_failed_writes_from_now_on()
    checkpointing._quiet_failed_writes_from_now_on()  # a second failure adds nothing
    assert logging.getLogger("asyncio").filters.count(checkpointing._AFTER_FAILURE) == 1
    _collected_unretrieved(_raised_in(ORBAX_WRITE))
    assert _logged(caplog) == []
    _collected_unretrieved(_raised_in(os.path.join(os.sep, "elsewhere", "code.py")))
    assert _logged(caplog) == ["Future exception was never retrieved"]
