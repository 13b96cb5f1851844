"""Ctrl-C at every phase of a prepare run: one line, status 130, no traceback from any process, and
a rerun that resumes to the bytes of an uninterrupted run.

The interrupt is sent from inside the run at a named moment (`tests/support/faults/interrupt.py`),
to the whole process group as a terminal sends it, so what is tested does not depend on the
machine's speed; busy processes on every core run beside the interrupted run, as on a loaded CI
machine.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator

import pytest

from pipeline.corpus import write_corpus
from schemas import formats
from support.fault_runs import FAULTS, fault_env, foreground_job
from support.runs import REPO, run_outputs

sys.path.insert(0, FAULTS)
from interrupt import MOMENTS  # noqa: E402

INTERRUPTED = "prepare: interrupted; the units done are kept, and a rerun resumes"


def _prepare(
    corpus: str, out: str, env: dict | None = None, *, sigint=signal.SIG_DFL
) -> subprocess.CompletedProcess:
    """`prepare` as a terminal's foreground job, or with SIGINT at `sigint` (`foreground_job`)."""
    args = [
        "--input",
        corpus,
        "--output",
        out,
        "--unit-bytes",
        "65536",
        "--dedup",
        "exact",
        "--direct_num_workers=2",
    ]
    return foreground_job(["-m", "pipeline", "prepare", *args], env, sigint=sigint)


def _interrupting_at(moment: str, state: str) -> dict[str, str]:
    os.makedirs(state)
    return fault_env(INTERRUPT_AT=moment, INTERRUPT_STATE_DIR=state)


@contextlib.contextmanager
def _every_core_busy() -> Iterator[None]:
    hogs = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"])
        for _ in range(os.cpu_count() or 1)
    ]
    try:
        yield
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> tuple[str, dict[str, bytes]]:
    root = tmp_path_factory.mktemp("uninterrupted")
    corpus = str(root / "stories.txt")
    write_corpus(corpus, 12000, seed=5)
    result = _prepare(corpus, str(root / "out"))
    assert result.returncode == 0, result.stderr
    return corpus, run_outputs(str(root / "out"))


@pytest.mark.slow
@pytest.mark.parametrize("moment", sorted(MOMENTS))
def test_ctrl_c_stops_with_one_line_and_status_130_and_the_rerun_resumes(
    moment, uninterrupted, tmp_path
):
    corpus, expected = uninterrupted
    out = str(tmp_path / "out")
    env = _interrupting_at(moment, str(tmp_path / "state"))
    with _every_core_busy():
        result = _prepare(corpus, out, env)
    assert (tmp_path / "state" / "sent").exists(), (
        f"the run never reached {moment}: {result.stderr}"
    )
    assert result.returncode == 130, result.stderr
    assert "Traceback" not in result.stderr and "Exception" not in result.stderr, result.stderr
    assert result.stderr.splitlines()[-1] == INTERRUPTED, result.stderr
    assert not os.path.exists(os.path.join(out, formats.MANIFEST_NAME))

    rerun = _prepare(corpus, out)
    assert rerun.returncode == 0, rerun.stderr
    if moment == "units":  # the units recorded before the interrupt are not run again
        done = int(rerun.stderr.split(" already done)")[0].rsplit("(", 1)[1])
        assert done >= MOMENTS[moment].after_call, rerun.stderr
    assert run_outputs(out) == expected


@pytest.mark.slow
def test_a_run_started_with_ctrl_c_ignored_is_not_disturbed_by_it(uninterrupted, tmp_path):
    """`nohup prepare ... &` from a script: neither the launcher nor any worker acts on SIGINT."""
    corpus, expected = uninterrupted
    out = str(tmp_path / "out")
    result = _prepare(
        corpus, out, _interrupting_at("units", str(tmp_path / "state")), sigint=signal.SIG_IGN
    )
    assert (tmp_path / "state" / "sent").exists()
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr and "Error" not in result.stderr, result.stderr
    assert json.loads(open(os.path.join(out, formats.RUN_INFO_NAME)).read())["job_restarts"] == 0
    assert run_outputs(out) == expected


_SWALLOWED = """
import os, signal
from pipeline.cli import interrupts

interrupts.install()

class Finalizer:
    def __del__(self):
        os.kill(os.getpid(), signal.SIGINT)  # handled at the next bytecode, inside the finalizer
        return None

Finalizer()
print(interrupts.received())
"""


def test_an_interrupt_swallowed_by_a_finalizer_is_still_received_and_prints_nothing():
    result = subprocess.run(
        [sys.executable, "-c", _SWALLOWED],
        cwd=REPO,
        capture_output=True,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        timeout=60,
    )
    assert (result.returncode, result.stdout, result.stderr) == (0, "True\n", "")
