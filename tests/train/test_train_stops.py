"""How a run stops before its end, each in one line with its own status: a bad setting before any
work, a loss gone non-finite, a checkpoint that cannot be written (read-only, full disk), SIGTERM
(saved, then resumed exactly) and Ctrl-C at any moment.

Signals are sent from inside the run at named moments (`tests/support/faults/interrupt.py`), so
what is tested does not depend on the machine's speed. A read-only or full checkpoint directory is a
small tmpfs mounted in a user and mount namespace of the test's own.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from support.fault_runs import fault_env, foreground_job, in_namespace
from support.runs import run_command
from train.checkpointing import Checkpointer
from train.metrics import METRICS_NAME, read_rows
from train.stopping import PREEMPTED_STATUS

SIZE = ["--width", "32", "--layers", "1", "--heads", "2", "--seq-len", "32", "--batch-size", "4"]


def _train_args(data: str, workdir: str, *extra: str) -> list[str]:
    return [
        "--data",
        data,
        "--workdir",
        workdir,
        *SIZE,
        "--learning-rate",
        "3e-3",
        "--warmup-steps",
        "2",
        "--eval-batches",
        "0",
        *extra,
    ]


def _losses(workdir: str) -> list[float]:
    return [r["loss"] for r in read_rows(os.path.join(workdir, METRICS_NAME)) if "loss" in r]


def _latest_checkpoint(workdir: str) -> int | None:
    checkpointer = Checkpointer(workdir, every=1, keep=3)
    try:
        return checkpointer.latest_step()
    finally:
        checkpointer.close()


def _one_line(stderr: str) -> str:
    """The last line of stderr, which must be the only one past the run's own progress lines."""
    assert "Traceback" not in stderr and "Event loop is closed" not in stderr, stderr[-3000:]
    lines = [
        line
        for line in stderr.strip().splitlines()
        if not line.startswith(("step ", "train: attention through", "train: resuming"))
    ]
    assert len(lines) == 1, stderr[-3000:]
    return lines[0]


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--learning-rate", "-1"], "--learning-rate must be positive, got -1.0"),
        (["--learning-rate", "0"], "--learning-rate must be positive, got 0.0"),
        (["--learning-rate", "nan"], "--learning-rate must be finite, got nan"),
        (["--learning-rate", "inf"], "--learning-rate must be finite, got inf"),
        (["--min-learning-rate=-1e-4"], "--min-learning-rate must be at least 0, got -0.0001"),
        (
            ["--min-learning-rate", "0.01"],
            "--min-learning-rate must be in [0, --learning-rate], got "
            "--min-learning-rate 0.01, --learning-rate 0.003",
        ),
        (["--beta2", "2"], "--beta2 must be in [0, 1), got 2.0"),
        (["--grad-clip", "-1"], "--grad-clip must be positive, got -1.0"),
        (["--weight-decay", "-3"], "--weight-decay must be at least 0, got -3.0"),
        (["--weight-decay", "inf"], "--weight-decay must be finite, got inf"),
        (["--heads", "0"], "--heads must be at least 1, got 0"),
        (["--width", "0"], "--width must be at least 1, got 0"),
        (["--layers", "-2"], "--layers must be at least 1, got -2"),
        (["--heads", "3"], "--width must be divisible by --heads, got --width 32, --heads 3"),
        (["--steps", "0"], "--steps must be at least 1, got 0"),
        (
            ["--gradient-accumulation-steps", "0"],
            "--gradient-accumulation-steps must be at least 1, got 0",
        ),
        (
            ["--gradient-accumulation-steps", "3"],
            "--gradient-accumulation-steps must divide --batch-size, got "
            "--gradient-accumulation-steps 3, --batch-size 4",
        ),
        (["--loader-workers", "-1"], "--loader-workers must be at least 0, got -1"),
        (["--profile-steps", "-1"], "--profile-steps must be at least 0, got -1"),
        (["--profile-skip-steps", "-1"], "--profile-skip-steps must be at least 0, got -1"),
    ],
)
def test_each_bad_setting_is_refused_in_one_line_before_any_work(
    token_dataset, tmp_path, capsys, flags, message
):
    workdir = str(tmp_path / "run")
    code = run_command("train", *_train_args(token_dataset, workdir, "--steps", "4", *flags))
    out, err = capsys.readouterr()
    assert code == 2
    assert err.strip().splitlines() == [f"train: error: {message}"]
    assert not os.path.exists(workdir)


@pytest.mark.integration
def test_a_loss_gone_non_finite_stops_the_run_at_that_step(stories_dataset, tmp_path, capsys):
    workdir = str(tmp_path / "run")
    code = run_command(
        "train",
        *_train_args(
            stories_dataset,
            workdir,
            "--steps",
            "30",
            "--learning-rate",
            "1e9",
            "--checkpoint-every",
            "1",
            "--log-every",
            "5",
        ),
    )
    _, err = capsys.readouterr()
    assert code == 1
    line = _one_line(err)
    step = int(line.split("train: error: step ")[1].split(":")[0])
    assert f"the checkpoint of step {step - 1} is the last good state" in line, line
    assert "training diverged" in line
    # The step is found at the next logged step, or the next checkpoint (here every step): the run
    # stops there, and saved nothing from the bad step on.
    assert _latest_checkpoint(workdir) == step - 1
    rows = read_rows(os.path.join(workdir, METRICS_NAME))
    assert all(r["step"] < step for r in rows)
    assert all(r["loss"] == r["loss"] for r in rows)  # no nan logged


def _run(args: list[str], env: dict | None = None) -> subprocess.CompletedProcess:
    """`python -m train` as a terminal's foreground job."""
    return foreground_job(["-m", "train", *args], env)


def _signalled_at(moment: str, state: str, signal_name: str = "SIGINT") -> dict[str, str]:
    os.makedirs(state)
    return fault_env(
        INTERRUPT_AT=moment,
        INTERRUPT_STATE_DIR=state,
        INTERRUPT_SIGNAL=signal_name,
        JAX_PLATFORMS="cpu",
    )


@pytest.fixture(scope="module")
def uninterrupted(stories_dataset, tmp_path_factory) -> str:
    workdir = str(tmp_path_factory.mktemp("uninterrupted") / "run")
    result = _run(_train_args(stories_dataset, workdir, "--steps", "8", "--checkpoint-every", "6"))
    assert result.returncode == 0, result.stderr[-3000:]
    return workdir


@pytest.mark.slow
def test_sigterm_saves_the_step_it_reached_and_the_rerun_resumes_exactly(
    stories_dataset, uninterrupted, tmp_path
):
    workdir = str(tmp_path / "run")
    args = _train_args(stories_dataset, workdir, "--steps", "8", "--checkpoint-every", "6")
    # SIGTERM during step 3 (its batch being fed): step 4 is the last, and saved.
    result = _run(args, _signalled_at("step-3", str(tmp_path / "state"), "SIGTERM"))
    assert result.returncode == PREEMPTED_STATUS == 143, result.stderr[-3000:]
    assert _one_line(result.stderr) == (
        "train: stopped by SIGTERM: the checkpoint of step 4 is saved; run the same command again "
        "to resume"
    )
    assert _latest_checkpoint(workdir) == 4
    rerun = _run(args)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert "train: resuming from the checkpoint of step 4 of 8" in rerun.stderr
    assert _losses(workdir) == _losses(uninterrupted)


@pytest.mark.slow
def test_sigterm_before_the_first_step_stops_at_once(stories_dataset, tmp_path):
    workdir = str(tmp_path / "run")
    result = _run(
        _train_args(stories_dataset, workdir, "--steps", "8"),
        _signalled_at("opening", str(tmp_path / "state"), "SIGTERM"),
    )
    assert result.returncode == 143, result.stderr[-3000:]
    assert _one_line(result.stderr) == (
        "train: stopped by SIGTERM: no step was trained, nothing to save; run the same command "
        "again to resume"
    )
    assert not _losses(workdir)


@pytest.mark.slow
@pytest.mark.parametrize(
    "moment", ["numpy-import", "jaxlib-import", "gc-callback", "opening", "step-3"]
)
def test_ctrl_c_at_any_moment_stops_with_one_line_and_status_130(stories_dataset, tmp_path, moment):
    workdir = str(tmp_path / "run")
    result = _run(
        _train_args(stories_dataset, workdir, "--steps", "40"),
        _signalled_at(moment, str(tmp_path / "s")),
    )
    assert (tmp_path / "s" / "sent").exists(), (
        f"the run never reached {moment}: {result.stderr[-3000:]}"
    )
    assert result.returncode == 130, result.stderr[-3000:]
    assert _one_line(result.stderr) == "train: interrupted"
    assert len(_losses(workdir)) < 5  # it stopped where the interrupt came, not at the end


@pytest.mark.integration
def test_ctrl_c_inside_a_checkpoint_save_stops_cleanly_with_the_checkpoints_whole(
    stories_dataset, tmp_path
):
    """CPU devices save synchronously: the interrupt lands while Orbax writes the checkpoint of
    step 2 into its temporary directory."""
    workdir = str(tmp_path / "run")
    result = _run(
        _train_args(stories_dataset, workdir, "--steps", "40", "--checkpoint-every", "1"),
        _signalled_at("checkpoint-2", str(tmp_path / "s")),
    )
    assert (tmp_path / "s" / "sent").exists(), result.stderr[-3000:]
    assert result.returncode == 130, result.stderr[-3000:]
    assert _one_line(result.stderr) == "train: interrupted"
    # The save was finished: no temporary directory left, and both checkpoints restore.
    assert sorted(os.listdir(os.path.join(workdir, "checkpoints"))) == ["1", "2"]
    rerun = _run(_train_args(stories_dataset, workdir, "--steps", "3"))
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert "train: resuming from the checkpoint of step 2 of 3" in rerun.stderr


def _mount_point(tmp_path, data: str, *extra: str) -> tuple[str, str, str]:
    """A run's workdir, its checkpoint directory made ready to mount a tmpfs on, and the run's
    flags."""
    workdir = tmp_path / "run"
    checkpoints = workdir / "checkpoints"
    checkpoints.mkdir(parents=True)
    return str(workdir), str(checkpoints), " ".join(_train_args(data, str(workdir), *extra))


# A run whose checkpoint directory turns read-only once the checkpoint of step 4 is written.
_READ_ONLY_AFTER_STEP_4 = """
import os, subprocess, sys, time
sys.path.insert(0, ".")
from pipeline.cli import commands
from train.checkpointing import Checkpointer

directory = sys.argv[1]
real = Checkpointer.save

def save(self, step, *args, **kwargs):
    waited = real(self, step, *args, **kwargs)
    if step == 4:
        self._finish()
        subprocess.run(["mount", "-o", "remount,ro", directory], check=True)
        print(f"read-only at {time.time()}", flush=True)
    return waited

Checkpointer.save = save
commands.exit_now(commands.run_command("train", sys.argv[2:], "train"))
"""


@pytest.mark.slow
def test_a_checkpoint_directory_turned_read_only_ends_the_run_in_one_line_within_seconds(
    stories_dataset, tmp_path
):
    workdir, checkpoints, args = _mount_point(
        tmp_path, stories_dataset, "--steps", "40", "--checkpoint-every", "4"
    )
    script = tmp_path / "driver.py"
    script.write_text(_READ_ONLY_AFTER_STEP_4)
    result = in_namespace(
        f"mount -t tmpfs -o size=64m tmpfs {checkpoints} && "
        f"{sys.executable} {script} {checkpoints} {args}; echo status $? $(date +%s.%N)"
    )
    status, ended = result.stdout.split("status ")[1].split()
    began = float(result.stdout.split("read-only at ")[1].split()[0])
    assert status == "1", result.stderr[-3000:]
    assert _one_line(result.stderr) == (
        f"train: error: cannot write the checkpoint of step 8 to {checkpoints}: Read-only file "
        f"system ({checkpoints}/8.orbax-checkpoint-tmp)"
    )
    assert float(ended) - began < 30  # four short steps and the way out, not Orbax's 300 s wait


@pytest.mark.slow
def test_a_read_only_checkpoint_directory_is_refused_before_training(stories_dataset, tmp_path):
    workdir, checkpoints, args = _mount_point(tmp_path, stories_dataset, "--steps", "8")
    # The shell prints its pid, which the run keeps: the probe's name holds it.
    result = in_namespace(
        f"mount -t tmpfs -o ro tmpfs {checkpoints} && echo $$ && "
        f"exec {sys.executable} -m train {args}"
    )
    assert result.returncode == 1, result.stderr[-3000:]
    assert _one_line(result.stderr) == (
        f"train: error: cannot write checkpoints to {checkpoints}: Read-only file system "
        f"({checkpoints}/.probe-0-{result.stdout.strip()})"
    )
    assert not _losses(workdir)


@pytest.mark.slow
def test_a_full_disk_ends_the_run_in_one_line_and_keeps_the_checkpoint_before(
    stories_dataset, tmp_path
):
    """A checkpoint here is about 17.6 MB: the second of 25 MB runs out of room in Orbax's
    writes."""
    workdir, checkpoints, args = _mount_point(
        tmp_path, stories_dataset, "--steps", "40", "--checkpoint-every", "4"
    )
    result = in_namespace(
        f"mount -t tmpfs -o size=25m tmpfs {checkpoints} && "
        f"{sys.executable} -m train {args} 2> {tmp_path}/err; "
        f"echo $? > {tmp_path}/status; ls {checkpoints} > {tmp_path}/left"
    )
    assert result.returncode == 0, result.stderr
    stderr = (tmp_path / "err").read_text()
    assert (tmp_path / "status").read_text().strip() == "1", stderr[-3000:]
    assert _one_line(stderr) == (
        f"train: error: cannot write the checkpoint of step 8 to {checkpoints}: No space left on "
        "device; its partial files are removed, their space given back"
    )
    # The checkpoint before is kept, and the failed one's temporary directory is gone.
    assert (tmp_path / "left").read_text().split() == ["4"]
    # Soon after the failure.
    assert max(r["step"] for r in read_rows(os.path.join(workdir, METRICS_NAME))) < 16
    with open(os.path.join(workdir, "config.json")) as f:
        assert json.load(f)["steps"] == 40
