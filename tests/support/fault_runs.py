"""Commands run as processes under faults: `prepare` with faults injected at named points (see
faults/), killed part way through a pass whatever the machine's load, or counted as its units
start; a command as a terminal's foreground job, for the interrupts a test sends it; a shell in a
namespace of its own, where a full or read-only disk can be mounted."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

from support.runs import REPO

FAULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "faults")


def fault_env(env: dict[str, str] | None = None, **faults: str) -> dict[str, str]:
    """`env` (this process's by default) with `faults` set and tests/support/faults/ on PYTHONPATH,
    so that every Python process of a run started with it installs them as it starts (see its
    sitecustomize)."""
    env = dict(os.environ if env is None else env)
    return {**env, "PYTHONPATH": os.pathsep.join([FAULTS, env.get("PYTHONPATH", "")]), **faults}


def foreground_job(
    args: list[str],
    env: dict[str, str] | None = None,
    *,
    sigint=signal.SIG_DFL,
    timeout: float = 600,
) -> subprocess.CompletedProcess:
    """`python ARGS` in a process group of its own, started with SIGINT at `sigint`: by default as a
    terminal starts a foreground job, whatever this test runner inherited (a runner started in the
    background of a script ignores SIGINT, and so would the run)."""
    return subprocess.run(
        [sys.executable, *args],
        cwd=REPO,
        env=env,
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, sigint),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def in_namespace(script: str, *, timeout: float = 600) -> subprocess.CompletedProcess:
    """Runs a shell script as root of a new user and mount namespace: it may mount a small tmpfs."""
    return subprocess.run(
        ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", script],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _prepare_starting_units(
    args: list[str], *, in_pass: str, env: dict[str, str] | None, timeout: float, **faults: str
) -> tuple[subprocess.CompletedProcess, int, bool]:
    """Runs `python -m pipeline prepare ARGS` in a process group of its own with
    tests/support/faults/unit_starts.py installed for the pass `in_pass`; returns the run, how many
    units started the pass, and whether the run was killed."""
    with tempfile.TemporaryDirectory() as state:
        command = [sys.executable, "-m", "pipeline", "prepare", *args]
        process = subprocess.Popen(
            command,
            cwd=REPO,
            env=fault_env(env, UNITS_PASS=in_pass, UNITS_STATE_DIR=state, **faults),
            start_new_session=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            _, stderr = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
            raise
        names = os.listdir(state)
        run = subprocess.CompletedProcess(command, process.returncode, "", stderr)
        return run, len([n for n in names if n.startswith("started-")]), "killed" in names


def kill_prepare_part_way(
    args: list[str],
    *,
    after: int,
    in_pass: str = "units",
    env: dict[str, str] | None = None,
    timeout: float = 300,
) -> None:
    """Runs `python -m pipeline prepare ARGS` until a fault SIGKILLs its whole process group (the
    launcher and its workers) as a unit starts the pass `in_pass` ("cleaning" or "units") after
    `after` others have: then between 1 and `after` units have a record, given `after` at least the
    number of worker processes, however loaded the machine is."""
    run, _, killed = _prepare_starting_units(
        args, in_pass=in_pass, env=env, timeout=timeout, KILL_AFTER=str(after)
    )
    assert killed, (
        f"the run ended before unit {after + 1} started its {in_pass} pass: {run.stderr[-2000:]}"
    )


def resumed_run(
    args: list[str],
    *,
    in_pass: str = "units",
    env: dict[str, str] | None = None,
    timeout: float = 300,
) -> tuple[int, str]:
    """Runs `python -m pipeline prepare ARGS` to a successful end; returns how many units started
    the pass `in_pass` (a unit resumed from an earlier run's record does not), and what the run
    wrote on stderr."""
    run, started, _ = _prepare_starting_units(args, in_pass=in_pass, env=env, timeout=timeout)
    assert run.returncode == 0, run.stderr[-2000:]
    return started, run.stderr


def units_started(
    args: list[str],
    *,
    in_pass: str = "units",
    env: dict[str, str] | None = None,
    timeout: float = 300,
) -> int:
    """`resumed_run`'s count of the units that started the pass `in_pass`."""
    return resumed_run(args, in_pass=in_pass, env=env, timeout=timeout)[0]


def kill_prepare_when(
    args: list[str],
    *,
    done: Callable[[], int],
    at_least: int,
    timeout: float = 120,
    poll: float = 0.005,
    env: dict[str, str] | None = None,
) -> None:
    """Starts `python -m pipeline prepare ARGS` in a process group of its own and SIGKILLs the whole
    group (the launcher and its workers) once `done()` counts `at_least`, or after `timeout`: for
    runs whose units run outside the launcher's processes (a Dask cluster's), where no fault
    reaches; elsewhere `kill_prepare_part_way` kills at a named point instead, whatever the
    timing."""
    process = subprocess.Popen(
        [sys.executable, "-m", "pipeline", "prepare", *args],
        cwd=REPO,
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and done() < at_least:
        time.sleep(poll)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
