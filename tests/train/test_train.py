"""The trainer end to end on data made by `prepare`: resume exactness, config checks, sampling,
and a two-process run."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys

import numpy as np
import pytest

from support.runs import REPO
from support.training import small_config
from train.config import TrainConfig
from train.metrics import METRICS_NAME, read_rows
from train.run_tokenizer import TOKENIZER_NAME
from train.sample import sample
from train.trainer import train


def _config(stories_dataset: str, workdir: str, **overrides) -> TrainConfig:
    return small_config(stories_dataset, workdir, **{"eval_batches": 2, **overrides})


def _losses(workdir: str) -> tuple[list[float], list[float]]:
    rows = read_rows(os.path.join(workdir, METRICS_NAME))
    steps = [r["step"] for r in rows if "loss" in r]
    assert steps == sorted(set(steps)), "every step is logged once"
    return [r["loss"] for r in rows if "loss" in r], [
        r["eval_loss"] for r in rows if "eval_loss" in r
    ]


@pytest.fixture(scope="module")
def uninterrupted(stories_dataset, tmp_path_factory) -> tuple[str, dict]:
    workdir = str(tmp_path_factory.mktemp("whole"))
    return workdir, train(_config(stories_dataset, workdir))


@pytest.mark.integration
def test_resume_continues_exactly_as_an_uninterrupted_run(stories_dataset, uninterrupted, tmp_path):
    whole_dir, whole = uninterrupted
    first = train(_config(stories_dataset, str(tmp_path / "split"), steps=4, decay_steps=8))
    assert first["step"] == 4
    second = train(_config(stories_dataset, str(tmp_path / "split"), decay_steps=8))
    assert second["step"] == 8
    losses, evals = _losses(whole_dir)
    resumed, resumed_evals = _losses(str(tmp_path / "split"))
    assert len(losses) == 8 and len(evals) == 2
    np.testing.assert_allclose(resumed, losses, rtol=1e-6)
    np.testing.assert_allclose(resumed_evals, evals, rtol=1e-6)
    assert second["params_sha256"] == whole["params_sha256"]
    assert os.path.exists(whole["plot"])


@pytest.mark.integration
def test_resume_after_a_crash_past_the_last_checkpoint(stories_dataset, uninterrupted, tmp_path):
    workdir = str(tmp_path / "run")
    train(
        _config(stories_dataset, workdir, steps=6, decay_steps=8)
    )  # checkpoints at 4 and 6 (the last)
    # As if the run died after logging step 6 but before its checkpoint landed.
    shutil.rmtree(os.path.join(workdir, "checkpoints", "6"))
    result = train(_config(stories_dataset, workdir, decay_steps=8))
    np.testing.assert_allclose(_losses(workdir)[0], _losses(uninterrupted[0])[0], rtol=1e-6)
    assert result["params_sha256"] == uninterrupted[1]["params_sha256"]


@pytest.mark.integration
def test_a_finished_run_is_not_trained_further(stories_dataset, uninterrupted):
    workdir, whole = uninterrupted
    again = train(_config(stories_dataset, workdir))
    assert again["params_sha256"] == whole["params_sha256"]
    assert len(_losses(workdir)[0]) == 8


@pytest.mark.integration
def test_changed_settings_are_refused_on_resume(stories_dataset, tmp_path):
    workdir = str(tmp_path / "run")
    train(_config(stories_dataset, workdir, steps=3))
    with pytest.raises(ValueError, match="different batch_size"):
        train(_config(stories_dataset, workdir, steps=4, batch_size=8))
    # Without --decay-steps, other --steps would stretch the schedule: refused too.
    with pytest.raises(ValueError, match="would move the schedule.s horizon from step 3"):
        train(_config(stories_dataset, workdir, steps=4))


@pytest.mark.integration
def test_sample_needs_only_the_workdir(stories_dataset, tmp_path):
    data = str(tmp_path / "data")
    shutil.copytree(stories_dataset, data)
    workdir = str(tmp_path / "run")
    train(_config(data, workdir, steps=3))
    shutil.rmtree(data)
    text = sample(workdir, "Once upon a time", max_tokens=8, seed=1)
    assert text.startswith("Once upon a time") and len(text) > len("Once upon a time")
    assert text == sample(workdir, "Once upon a time", max_tokens=8, seed=1)
    # The saved vocabulary hash is checked against the encoding loaded by name.
    path = os.path.join(workdir, TOKENIZER_NAME)
    with open(path) as f:
        record = json.load(f)
    assert (record["load_as"], record["info"]["name"], record["info"]["n_vocab"]) == (
        "gpt2",
        "gpt2",
        50257,
    )
    record["info"]["vocab_sha256"] = "0" * 64
    with open(path, "w") as f:
        json.dump(record, f)
    with pytest.raises(
        ValueError,
        match="tokenizer .gpt2. now has identity [0-9a-f]{12}, not the run's 000000000000",
    ):
        sample(workdir, "Once upon a time", max_tokens=8)


@pytest.mark.integration
def test_cli_errors_are_one_line(tmp_path):
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "train",
            "--data",
            str(tmp_path / "nothing"),
            "--workdir",
            str(tmp_path / "w"),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1].startswith("train: error:")
    assert "Traceback" not in result.stderr


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_loader_workers_may_change_on_resume(stories_dataset, uninterrupted, tmp_path):
    workdir = str(tmp_path / "run")
    train(_config(stories_dataset, workdir, steps=4, decay_steps=8, loader_workers=0))
    result = train(_config(stories_dataset, workdir, decay_steps=8, loader_workers=2))
    np.testing.assert_allclose(_losses(workdir)[0], _losses(uninterrupted[0])[0], rtol=1e-6)
    assert result["params_sha256"] == uninterrupted[1]["params_sha256"]


@pytest.mark.slow
def test_two_processes_train_one_model_from_their_own_parts(stories_dataset, tmp_path):
    port = _free_port()
    workdir = str(tmp_path / "run")
    common = [
        sys.executable,
        "-m",
        "train",
        "--data",
        stories_dataset,
        "--workdir",
        workdir,
        "--steps",
        "6",
        "--batch-size",
        "4",
        "--seq-len",
        "32",
        "--width",
        "32",
        "--layers",
        "1",
        "--heads",
        "2",
        "--checkpoint-every",
        "3",
        "--eval-every",
        "3",
        "--eval-batches",
        "1",
        "--coordinator",
        f"127.0.0.1:{port}",
        "--num-processes",
        "2",
    ]
    env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS="")
    procs = [
        subprocess.Popen(
            [*common, "--process-id", str(i)],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]
    outputs = [p.communicate(timeout=600) for p in procs]
    for p, (_, err) in zip(procs, outputs):
        assert p.returncode == 0, err[-3000:]
    # Where several processes must agree, each says what it holds, on stderr with its notes.
    digests = [
        next(line.split()[-1] for line in err.splitlines() if "params sha256" in line)
        for _, err in outputs
    ]
    assert digests[0] == digests[1]
    assert "process 0" in outputs[0][1] and "process 1" in outputs[1][1]
    assert not any("params sha256" in out or "final loss" in out for out, _ in outputs)
    rows = read_rows(os.path.join(workdir, METRICS_NAME))
    assert [r["step"] for r in rows if "loss" in r] == list(range(1, 7))
    with open(os.path.join(workdir, "config.json")) as f:
        assert json.load(f)["batch_size"] == 4


@pytest.mark.integration
def test_a_resume_on_other_data_is_refused_naming_the_source(stories_dataset, tmp_path):
    data = str(tmp_path / "data")
    shutil.copytree(stories_dataset, data)
    workdir = str(tmp_path / "run")
    train(_config(data, workdir, steps=3, checkpoint_every=3))
    # As if the directory were prepared again under the same path: same shards, another manifest.
    path = os.path.join(data, "manifest.json")
    with open(path) as f:
        manifest = json.load(f)
    manifest["skipped"] = {**manifest["skipped"], "empty": manifest["skipped"].get("empty", 0) + 1}
    with open(path, "w") as f:
        json.dump(manifest, f)
    with pytest.raises(
        ValueError, match="source .data. is not the data the checkpoint at step 3 was trained on"
    ):
        train(_config(data, workdir, steps=4, decay_steps=3))


@pytest.mark.integration
def test_eval_batches_0_turns_evaluation_off(stories_dataset, tmp_path):
    workdir = str(tmp_path / "run")
    result = train(_config(stories_dataset, workdir, steps=3, eval_every=1, eval_batches=0))
    assert result["step"] == 3 and "eval_loss" not in result
    assert _losses(workdir)[1] == []
