"""`gs://` end to end on a real GCS API emulator: the real clients (Beam's GcsIO, gcsfs under epath,
ArrayRecord's own GCS reader), nothing mocked. The shards written to gs:// are byte-identical to a
local run's, and the loader and the trainer read them from gs:// directly."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from pipeline.corpus import write_corpus
from pipeline.dataset import storage
from pipeline.load.batches import main as batches_main
from schemas import formats
from support.fault_runs import kill_prepare_part_way
from support.gcs_emulator import gcs_emulator_fixture
from support.runs import REPO, run_prepare, tree_bytes
from train.metrics import METRICS_NAME, read_rows

pytestmark = pytest.mark.integration  # every test here runs a command, a process or training

ARGS = ("--unit-bytes", "65536", "--validation-fraction", "0.1")

gcs = gcs_emulator_fixture()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> str:
    path = str(tmp_path_factory.mktemp("corpus") / "stories.txt")
    write_corpus(path, 3000, seed=11)
    return path


@pytest.fixture
def bucket(gcs, corpus):
    """The emptied bucket, holding the corpus at raw/stories.txt."""
    gcs.reset()
    with open(corpus, "rb") as f:
        storage.write_bytes_atomic(gcs.url("raw/stories.txt"), f.read())
    return gcs


@pytest.fixture(scope="module")
def local_run(corpus, tmp_path_factory) -> str:
    out = str(tmp_path_factory.mktemp("local") / "out")
    run_prepare([corpus], out, *ARGS)
    return out


def objects(gcs, prefix: str) -> dict[str, bytes]:
    """Relative name -> bytes of every object under a prefix."""
    root = gcs.url(prefix)
    paths = storage.glob(storage.join(root, "**"))
    result = {}
    for path in paths:
        with storage.open_raw(path) as f:
            result[path[len(root) + 1 :]] = f.read()
    return result


def cli(gcs, *args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pipeline", *args],
        cwd=REPO,
        env=gcs.subprocess_env(),
        capture_output=True,
        text=True,
        timeout=600,
        **kwargs,
    )


def test_prepare_to_gcs_writes_the_bytes_of_a_local_run(bucket, local_run):
    out = bucket.url("out")
    result = cli(
        bucket, "prepare", "--input", bucket.url("raw/stories.txt"), "--output", out, *ARGS
    )
    assert result.returncode == 0, result.stderr
    remote = objects(bucket, "out")
    local = tree_bytes(local_run)
    shard_names = {k for k in local if k.startswith(formats.SPLITS)}
    assert shard_names and {k: remote[k] for k in shard_names} == {k: local[k] for k in shard_names}
    # Nothing but the output: no state, no scratch objects.
    assert set(remote) == shard_names | {
        formats.MANIFEST_NAME,
        formats.RUN_INFO_NAME,
        formats.REJECTS_NAME,
    }
    manifest = json.loads(remote[formats.MANIFEST_NAME])
    local_manifest = json.loads(local[formats.MANIFEST_NAME])
    assert manifest["shards"] == local_manifest["shards"]
    assert manifest["inputs"][0]["digest"] == local_manifest["inputs"][0]["digest"]
    verified = cli(bucket, "verify", out)
    assert verified.returncode == 0 and "all" in verified.stdout
    inspected = cli(bucket, "inspect", out, "--documents", "1")
    assert inspected.returncode == 0 and "--- document 0" in inspected.stdout


@pytest.mark.slow
def test_the_loader_reads_gcs_shards_directly(bucket, local_run, tmp_path):
    out = bucket.url("out")
    run_prepare([bucket.url("raw/stories.txt")], out, *ARGS)
    for packing, workers in (("concat", "0"), ("document", "2")):
        args = [
            "--seq-len",
            "64",
            "--batch-size",
            "4",
            "--take",
            "epoch",
            "--packing",
            packing,
            "--workers",
            workers,
        ]
        assert batches_main([out, *args, "--out", str(tmp_path / "remote.npz")]) == 0
        assert batches_main([local_run, *args, "--out", str(tmp_path / "local.npz")]) == 0
        remote, local = np.load(tmp_path / "remote.npz"), np.load(tmp_path / "local.npz")
        assert remote.files == local.files and len(remote["inputs"]) > 10
        for name in local.files:
            np.testing.assert_array_equal(remote[name], local[name])


@pytest.mark.slow
def test_overwrite_on_gcs_replaces_only_what_prepare_wrote(bucket):
    source, out = bucket.url("raw/stories.txt"), bucket.url("out")
    first = run_prepare([source], out, "--unit-bytes", "65536")
    storage.write_bytes_atomic(bucket.url("out/NOTES"), b"someone else's")
    second = run_prepare([source], out, "--unit-bytes", "131072", "--overwrite")
    assert {s.path for s in first.shards}.isdisjoint(s.path for s in second.shards)
    names = set(objects(bucket, "out"))
    assert names == {
        "NOTES",
        formats.MANIFEST_NAME,
        formats.RUN_INFO_NAME,
        formats.REJECTS_NAME,
        *(s.path for s in second.shards),
    }


@pytest.mark.slow
def test_a_killed_run_on_gcs_resumes_to_the_same_bytes(bucket, local_run):
    source, out = bucket.url("raw/stories.txt"), bucket.url("killed")
    units = storage.join(out, formats.STATE_DIR, formats.UNITS_DIR)
    kill_prepare_part_way(
        ["--input", source, "--output", out, *ARGS, "--direct_num_workers=2"],
        env=bucket.subprocess_env(),
        after=2,
    )
    done = len(storage.list_files(units, ".json"))
    assert 0 < done <= 2 and not storage.exists(storage.join(out, formats.MANIFEST_NAME))
    manifest = run_prepare([source], out, *ARGS)
    info = json.loads(objects(bucket, "killed")[formats.RUN_INFO_NAME])
    assert info["units_resumed"] == done
    local = tree_bytes(local_run)
    remote = objects(bucket, "killed")
    assert all(remote[s.path] == local[s.path] for s in manifest.shards)
    assert set(remote) == {
        formats.MANIFEST_NAME,
        formats.RUN_INFO_NAME,
        formats.REJECTS_NAME,
        *(s.path for s in manifest.shards),
    }


@pytest.mark.slow
def test_training_from_gcs_equals_training_from_local_data(bucket, local_run, tmp_path):
    out = bucket.url("out")
    run_prepare([bucket.url("raw/stories.txt")], out, *ARGS)
    losses = []  # each step's train and eval loss: the same batches give the same floats
    for data in (out, local_run):
        run = subprocess.run(
            [
                sys.executable,
                "-m",
                "train",
                "--data",
                data,
                "--workdir",
                str(tmp_path / f"run{len(losses)}"),
                "--steps",
                "3",
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
            ],
            cwd=REPO,
            env=dict(bucket.subprocess_env(), JAX_PLATFORMS="cpu"),
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert run.returncode == 0, run.stderr[-3000:]
        rows = read_rows(os.path.join(tmp_path / f"run{len(losses)}", METRICS_NAME))
        losses.append([(r["step"], r.get("loss"), r.get("eval_loss")) for r in rows])
    assert len(losses[0]) >= 3 and losses[0] == losses[1]
