"""What a run records besides metrics.jsonl: TensorBoard scalars equal to its rows (read back with
TensorBoard's own reader, a resume's dropped rows dropped there too), and a jax.profiler trace of
the steps asked for."""

from __future__ import annotations

import glob
import gzip
import json
import os
import shutil

import numpy as np
import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from support.training import small_config
from train.metrics import METRICS_NAME, TENSORBOARD_DIR, read_rows
from train.trainer import train

pytestmark = pytest.mark.integration  # every test here trains


def _scalars(workdir: str) -> dict[str, list[tuple[int, float]]]:
    events = EventAccumulator(os.path.join(workdir, TENSORBOARD_DIR), size_guidance={"scalars": 0})
    events.Reload()
    return {
        tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]
    }


def _rows_as_scalars(workdir: str) -> dict[str, list[tuple[int, float]]]:
    out: dict[str, list[tuple[int, float]]] = {}
    for row in read_rows(os.path.join(workdir, METRICS_NAME)):
        for name, value in row.items():
            if name != "step" and not isinstance(value, str):
                out.setdefault(name, []).append((row["step"], value))
    return out


def _assert_equal(scalars: dict, rows: dict) -> None:
    assert set(scalars) == set(rows) >= {"loss", "lr", "grad_norm", "tokens_per_s", "eval_loss"}
    for tag, points in rows.items():
        assert [s for s, _ in scalars[tag]] == [s for s, _ in points], tag
        # TensorBoard keeps float32.
        np.testing.assert_array_equal(
            [v for _, v in scalars[tag]], np.float32([v for _, v in points]), err_msg=tag
        )


def test_tensorboard_scalars_are_the_metrics_rows_also_after_a_resume(stories_dataset, tmp_path):
    workdir = str(tmp_path / "run")
    # Checkpoints at 4 and 6.
    result = train(small_config(stories_dataset, workdir, steps=6, decay_steps=8))
    assert result["tensorboard"] == os.path.join(workdir, TENSORBOARD_DIR)
    _assert_equal(_scalars(workdir), _rows_as_scalars(workdir))
    # As if the run died after logging step 6 but before its checkpoint landed: the resume from
    # step 4 logs steps 5 and 6 again, and TensorBoard shows them once, as metrics.jsonl does.
    shutil.rmtree(os.path.join(workdir, "checkpoints", "6"))
    train(small_config(stories_dataset, workdir, decay_steps=8))
    rows = _rows_as_scalars(workdir)
    assert [s for s, _ in rows["loss"]] == list(range(1, 9))
    _assert_equal(_scalars(workdir), rows)


def test_no_tensorboard_writes_no_event_files(stories_dataset, tmp_path):
    workdir = str(tmp_path / "run")
    result = train(
        small_config(stories_dataset, workdir, steps=3, warmup_steps=1, tensorboard=False)
    )
    assert "tensorboard" not in result and not os.path.exists(
        os.path.join(workdir, TENSORBOARD_DIR)
    )


def test_profile_steps_write_a_trace_of_those_steps(stories_dataset, tmp_path):
    workdir = str(tmp_path / "run")
    result = train(
        small_config(stories_dataset, workdir, steps=5, profile_steps=2, profile_skip_steps=1)
    )
    runs = glob.glob(os.path.join(workdir, TENSORBOARD_DIR, "plugins", "profile", "*"))
    assert [result["profile"]] == runs
    files = os.listdir(runs[0])
    # TensorBoard's profile plugin, XProf.
    assert any(name.endswith(".xplane.pb") for name in files), files
    assert "perfetto_trace.json.gz" in files, files
    with gzip.open(os.path.join(runs[0], "perfetto_trace.json.gz")) as f:
        trace = json.load(f)
    # The steps annotated are the second and the third (the first compiles).
    names = {event.get("name") for event in trace["traceEvents"]}
    assert {"train"} <= names, sorted(n for n in names if n)[:40]
    steps = sorted(
        {
            int(e["args"]["step_num"])
            for e in trace["traceEvents"]
            if e.get("name") == "train" and "step_num" in e.get("args", {})
        }
    )
    assert steps == [2, 3]


@pytest.mark.parametrize("steps, skip", [(0, 1), (3, 5)])
def test_no_trace_without_profile_steps_in_the_run(stories_dataset, tmp_path, steps, skip):
    workdir = str(tmp_path / "run")
    result = train(
        small_config(
            stories_dataset, workdir, steps=4, profile_steps=steps, profile_skip_steps=skip
        )
    )
    assert "profile" not in result
    assert not os.path.exists(os.path.join(workdir, TENSORBOARD_DIR, "plugins"))
