"""Work done in a forked child while the process goes on (`pipeline.forking`, which tokenizer
loading uses): its result, or its exception, comes back either way; with a second thread running
it runs in the process itself."""

from __future__ import annotations

import os
import threading

import pytest

from pipeline.forking import fork_is_safe, in_child


def _pid_and_parent() -> tuple[int, int]:
    return os.getpid(), os.getppid()


def test_work_runs_once_in_a_forked_child_and_its_result_comes_back():
    assert fork_is_safe()
    with in_child(_pid_and_parent) as result:
        pid, parent = result()
        assert result() == (pid, parent)  # not worked out here once the child has answered
    assert pid != os.getpid() and parent == os.getpid()


def test_a_child_that_fails_gives_the_works_exception_here():
    def fail() -> None:
        raise ValueError("bad rules")

    with pytest.raises(ValueError, match="bad rules"), in_child(fail) as result:
        result()


def test_with_another_thread_running_the_work_runs_here():
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    thread.start()
    try:
        assert not fork_is_safe()
        calls = []
        with in_child(lambda: calls.append(os.getpid()) or len(calls)) as result:
            assert (result(), result(), calls) == (1, 1, [os.getpid()])
    finally:
        stop.set()
        thread.join()
