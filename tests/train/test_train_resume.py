"""Resuming through the command line: settings not given come from the saved run, given ones must
match it (the error names the flag), and a finished run extends with a larger --steps."""

from __future__ import annotations

import json
import os
import re
import shutil

import pytest

from pipeline.corpus import write_corpus
from schemas import formats
from support.runs import run_command, run_prepare
from train.cli import main
from train.metrics import METRICS_NAME, read_rows

SIZE = ["--width", "32", "--layers", "1", "--heads", "2", "--seq-len", "32", "--batch-size", "4"]


@pytest.fixture(scope="module")
def prepared(tmp_path_factory) -> str:
    root = tmp_path_factory.mktemp("data")
    write_corpus(str(root / "stories.txt"), 200, seed=3)
    run_prepare([str(root / "stories.txt")], str(root / "out"), "--record-tokens", "512")
    return str(root / "out")


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = run_command("train", *argv)
    out, err = capsys.readouterr()
    return code, out, err


def _train_rows(workdir: str) -> list[dict]:
    return [r for r in read_rows(os.path.join(workdir, METRICS_NAME)) if "loss" in r]


@pytest.mark.integration
def test_a_finished_run_extends_with_more_steps_keeping_its_schedule(prepared, tmp_path, capsys):
    workdir = str(tmp_path / "run")
    code, _, err = _run(
        capsys,
        "--data",
        prepared,
        "--workdir",
        workdir,
        "--steps",
        "20",
        *SIZE,
        "--learning-rate",
        "3e-3",
        "--checkpoint-every",
        "100",
    )
    assert code == 0, err
    # Only --steps: everything else, --data included, comes from the saved run.
    code, out, err = _run(capsys, "--workdir", workdir, "--steps", "40")
    assert code == 0, err
    assert (
        "train: --steps 40: the learning-rate schedule keeps the saved run's horizon at step 20, "
        "then stays at its minimum; --decay-steps sets another"
    ) in err
    rows = _train_rows(workdir)
    assert [r["step"] for r in rows] == list(range(1, 41))
    with open(os.path.join(workdir, "config.json")) as f:
        saved = json.load(f)
    assert (saved["steps"], saved["decay_steps"], saved["warmup_steps"], saved["batch_size"]) == (
        40,
        20,
        2,
        4,
    )
    assert all(r["lr"] == pytest.approx(saved["min_learning_rate"]) for r in rows[20:])
    assert rows[10]["lr"] > saved["min_learning_rate"] * 2


@pytest.mark.integration
def test_decay_steps_on_resume_sets_a_new_horizon(prepared, tmp_path, capsys):
    workdir = str(tmp_path / "run")
    assert _run(capsys, "--data", prepared, "--workdir", workdir, "--steps", "10", *SIZE)[0] == 0
    code, out, err = _run(capsys, "--workdir", workdir, "--steps", "20", "--decay-steps", "30")
    assert code == 0, err
    assert (
        "train: --decay-steps 30: the learning-rate schedule's horizon moves from step 10 "
        "to step 30" in err
    )
    rows = _train_rows(workdir)
    assert rows[-1]["step"] == 20 and rows[-1]["lr"] > 2e-4  # still decaying towards step 30


@pytest.fixture(scope="module")
def finished(prepared, tmp_path_factory) -> str:
    workdir = str(tmp_path_factory.mktemp("finished") / "run")
    assert main(["--data", prepared, "--workdir", workdir, "--steps", "2", *SIZE]) == 0
    return workdir


@pytest.mark.integration
@pytest.mark.parametrize(
    "flags, message",
    [
        (["--batch-size", "8"], "--batch-size 8 differs from the saved run's 4"),
        (["--width", "64"], "--width 64 differs from the saved run's 32"),
        (["--bf16"], "--bf16 differs from the saved run's --no-bf16"),
        (["--warmup-steps", "5"], "--warmup-steps 5 differs from the saved run's 0"),
        (["--grad-clip", "0.5"], "--grad-clip 0.5 differs from the saved run's 1.0"),
        (["--weight-decay", "0"], "--weight-decay 0.0 differs from the saved run's 0.1"),
        (["--beta2", "0.99"], "--beta2 0.99 differs from the saved run's 0.95"),
        (
            ["--min-learning-rate", "0"],
            "--min-learning-rate 0.0 differs from the saved run's 0.0001",
        ),
    ],
)
def test_a_given_setting_must_match_the_saved_run(finished, capsys, flags, message):
    code, _, err = _run(capsys, "--workdir", finished, "--steps", "4", *flags)
    assert code == 2
    assert err.strip().splitlines() == [
        f"train: error: {message}; drop the flag or use another --workdir"
    ]
    assert len(_train_rows(finished)) == 2


@pytest.mark.integration
def test_given_settings_equal_to_the_saved_ones_and_cadence_flags_resume(
    prepared, finished, tmp_path, capsys
):
    workdir = str(tmp_path / "run")
    shutil.copytree(finished, workdir)
    code, _, err = _run(
        capsys,
        "--data",
        prepared,
        "--workdir",
        workdir,
        "--steps",
        "3",
        *SIZE,
        "--log-every",
        "3",
        "--eval-every",
        "5",
    )
    assert code == 0, err
    assert [r["step"] for r in _train_rows(workdir)] == [1, 2, 3]


def test_a_new_run_needs_data(tmp_path, capsys):
    code, _, err = _run(capsys, "--workdir", str(tmp_path / "empty"))
    assert code == 2
    assert "holds no run to resume; --data is required to start one" in err


@pytest.mark.integration
def test_the_optimizer_settings_have_flags_with_their_defaults_and_are_saved(
    prepared, tmp_path, capsys
):
    with pytest.raises(SystemExit):
        main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    for flag, shown in [
        ("--grad-clip", "1.0"),
        ("--weight-decay", "0.1"),
        ("--beta2", "0.95"),
        ("--min-learning-rate", "0.0001"),
    ]:
        assert re.search(
            rf"{flag} [A-Z0-9_]+ (?:(?! --).)*\(default: {re.escape(shown)}\)", text
        ), flag
    workdir = str(tmp_path / "run")
    code, _, err = _run(
        capsys,
        "--data",
        prepared,
        "--workdir",
        workdir,
        "--steps",
        "2",
        *SIZE,
        "--grad-clip",
        "0.5",
        "--weight-decay",
        "0.01",
        "--beta2",
        "0.99",
        "--min-learning-rate",
        "1e-5",
    )
    assert code == 0, err
    with open(os.path.join(workdir, "config.json")) as f:
        saved = json.load(f)
    assert (
        saved["grad_clip"],
        saved["weight_decay"],
        saved["beta2"],
        saved["min_learning_rate"],
    ) == (0.5, 0.01, 0.99, 1e-5)
    # Resumed without them, the saved values hold; given again equal, they are accepted.
    code, _, err = _run(capsys, "--workdir", workdir, "--steps", "3", "--beta2", "0.99")
    assert code == 0, err
    assert "train: resuming from the checkpoint of step 2 of 3" in err
    assert _train_rows(workdir)[-1]["step"] == 3


@pytest.mark.integration
def test_a_checkpoint_of_another_loader_version_is_refused_in_one_line(finished, tmp_path, capsys):
    # A run saved before batches were drawn from the whole epoch: its loader state (a position in
    # other batches) has no version. Resuming on it would train on other data than the run's.
    workdir = str(tmp_path / "run")
    shutil.copytree(finished, workdir)
    states = [
        os.path.join(root, name)
        for root, _, names in os.walk(os.path.join(workdir, "checkpoints"))
        for name in names
        if name.startswith("process_") and name.endswith(".json")
    ]
    assert states
    for path in states:
        with open(path) as f:
            state = json.load(f)
        assert state.pop("version") == formats.LOADER_STATE_VERSION
        with open(path, "w") as f:
            json.dump(state, f)
    code, _, err = _run(capsys, "--workdir", workdir, "--steps", "4")
    assert code == 1
    # After the resume's note on the schedule, on stderr with it.
    lines = err.strip().splitlines()
    assert lines[0].startswith("train: --steps 4: the learning-rate schedule keeps"), err
    assert (
        len(lines) == 2 and lines[1].startswith("train: error: ") and "loader version 1" in lines[1]
    ), err
    assert len(_train_rows(workdir)) == 2


@pytest.mark.integration
@pytest.mark.parametrize("steps", ["2", "1"])
def test_a_finished_run_says_so_and_changes_nothing(finished, tmp_path, capsys, steps):
    workdir = str(tmp_path / "run")
    shutil.copytree(finished, workdir)
    before = {
        name: open(os.path.join(workdir, name), "rb").read()
        for name in ("config.json", METRICS_NAME)
    }
    code, out, err = _run(capsys, "--workdir", workdir, "--steps", steps)
    assert code == 0, err
    past = " of 2" if steps == "2" else ", past --steps 1"
    # The run's notes on stderr, with its progress; no params digest from a lone process.
    assert f"train: already at step 2{past}; nothing to train (--steps sets a later end)" in err
    assert out == "" and "final loss" not in err and "params sha256" not in err
    assert before == {name: open(os.path.join(workdir, name), "rb").read() for name in before}


@pytest.mark.integration
def test_a_resume_says_the_step_it_resumes_from(finished, tmp_path, capsys):
    workdir = str(tmp_path / "run")
    shutil.copytree(finished, workdir)
    code, _, err = _run(capsys, "--workdir", workdir, "--steps", "3")
    assert code == 0, err
    assert "train: resuming from the checkpoint of step 2 of 3" in err
    assert _train_rows(workdir)[-1]["step"] == 3
