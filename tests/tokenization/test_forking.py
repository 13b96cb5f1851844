"""Work done in a forked child while the process goes on (`pipeline.forking`, which tokenizer
loading uses): its result, or its exception, comes back either way; with a second thread running
it runs in the process itself."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import pytest

from pipeline.forking import fork_is_safe, in_child

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


# A fresh interpreter: a test process may run threads (pytest-xdist's) or JAX's runtime, where
# forking is unsafe and the work runs in the process itself.
_IN_A_FRESH_PROCESS = """
import os

import pytest

from pipeline.forking import fork_is_safe, in_child


def pid_and_parent():
    return os.getpid(), os.getppid()


def fail():
    raise ValueError("bad rules")


assert fork_is_safe()
with in_child(pid_and_parent) as result:
    pid, parent = result()
    assert result() == (pid, parent)  # not worked out here once the child has answered
assert pid != os.getpid() and parent == os.getpid()
with pytest.raises(ValueError, match="bad rules"), in_child(fail) as result:
    result()
"""


@pytest.mark.integration
def test_work_runs_once_in_a_forked_child_and_its_result_or_exception_comes_back():
    subprocess.run([sys.executable, "-c", _IN_A_FRESH_PROCESS], cwd=REPO, check=True)


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
