"""Which rows each process feeds: the mapping from mesh positions to loader shards, the check that
processes sharing rows fed the same ones, and multi-process runs against one process with the mesh
simulated."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import numpy as np
import pytest

from support.runs import REPO
from train.host_batches import (
    FedBatches,
    batch_digest,
    check_shards_agree,
    row_digests,
    settle,
    sum_over_groups,
)
from train.mesh import HostShards, data_positions
from train.metrics import METRICS_NAME, read_rows
from train.processes import agreed, gather_int64


@pytest.mark.parametrize(
    "grid, expected",
    [
        ([[0, 1]], {0: (0,), 1: (0,)}),  # --mesh model=2 over two processes: both feed all rows
        ([[0], [1]], {0: (0,), 1: (1,)}),  # --mesh data=2: one half each
        (
            [[0, 0], [0, 0], [1, 1], [1, 1]],
            {0: (0, 1), 1: (2, 3)},
        ),  # data=4, model=2, two devices each
        ([[0, 0, 1, 1], [2, 2, 3, 3]], {0: (0,), 1: (0,), 2: (1,), 3: (1,)}),  # model=4 over pairs
        ([[0, 1], [0, 1]], {0: (0, 1), 1: (0, 1)}),
    ],
)
def test_processes_feed_the_shards_at_their_data_positions(grid, expected):
    assert data_positions(np.array(grid), data_axis=0) == expected


def test_partly_shared_positions_are_refused():
    with pytest.raises(ValueError, match="share only some of their data-axis positions"):
        data_positions(np.array([[0, 1], [1, 2]]), data_axis=0)  # process 1 at positions 0 and 1


@pytest.mark.parametrize("indices, count", [((), 2), ((1, 0), 2), ((0, 0), 2), ((2,), 2)])
def test_host_shards_are_checked(indices, count):
    with pytest.raises(ValueError, match="shard indices"):
        HostShards(indices, count)


def test_processes_of_one_group_must_agree():
    check_shards_agree([0, 0, 1], [b"a", b"a", b"b"], step=3)  # other groups may differ
    with pytest.raises(ValueError, match="processes 1 and 2 feed the same rows .* by step 7"):
        check_shards_agree([1, 0, 0], [b"a", b"b", b"c"], step=7)


def test_counts_add_up_once_per_group():
    counts = np.array([[1, 2], [1, 2], [10, 20], [10, 20]])
    np.testing.assert_array_equal(sum_over_groups([0, 0, 2, 2], counts), [11, 22])


@pytest.mark.parametrize(
    "indices, count, rows", [((0,), 1, (0, 1)), ((2, 3), 4, (1, 2)), ((1,), 4, (1, 4))]
)
def test_a_process_feeds_one_aligned_run_of_rows(indices, count, rows):
    assert HostShards(indices, count).rows == rows


def test_scattered_positions_are_refused():
    with pytest.raises(ValueError, match="not one aligned run"):
        _ = HostShards((1, 2), 4).rows


def test_the_batch_digest_does_not_depend_on_which_process_held_which_rows():
    rows = np.arange(8, dtype="<i8")
    whole = batch_digest([0], rows[None])
    assert batch_digest([4, 0], np.stack([rows[4:], rows[:4]])) == whole
    assert (
        batch_digest([0, 2, 0, 2], np.stack([rows[:2], rows[2:4]] * 2)[:, :2]) != whole
    )  # rows 4..7 missing


def test_one_process_gathers_exact_int64_and_its_own_counts():
    big = [2**40 + 3, -5, 2**62]
    np.testing.assert_array_equal(gather_int64(big), [big])
    fed = FedBatches(HostShards((0, 1), 2), num_sources=2, rows=2)
    fed.add({"inputs": np.zeros((2, 4), np.int32)}, np.array([3, 5]), rows=True)
    fed.add({"inputs": np.ones((2, 4), np.int32)}, np.array([1, 1]), rows=True)
    tokens, digest = settle(gather_int64(fed.report()), 2, step=2)
    np.testing.assert_array_equal(tokens, [4, 6])
    assert digest == batch_digest([0], row_digests({"inputs": np.ones((2, 4), np.int32)})[None])
    with pytest.raises(ValueError, match="no good"):
        agreed(lambda: (_ for _ in ()).throw(ValueError("no good")))


# Two processes on loopback, one CPU device each, gloo collectives (as `python -m train` sets up).


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _two_processes(
    args_of: list[list[str]], *, timeout: int = 300
) -> list[subprocess.CompletedProcess]:
    env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS="")
    port = _free_port()
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                *args,
                "--coordinator",
                f"127.0.0.1:{port}",
                "--num-processes",
                "2",
                "--process-id",
                str(i),
            ],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i, args in enumerate(args_of)
    ]
    try:
        outputs = [p.communicate(timeout=timeout) for p in procs]
    finally:
        for p in procs:
            p.kill()
    return [
        subprocess.CompletedProcess(p.args, p.returncode, out, err)
        for p, (out, err) in zip(procs, outputs)
    ]


def _train_args(stories_dataset: str, workdir: str, *extra: str) -> list[str]:
    return [
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
        *extra,
    ]


def _losses(workdir: str) -> list[float]:
    return [
        r.get("loss", r.get("eval_loss")) for r in read_rows(os.path.join(workdir, METRICS_NAME))
    ]


@pytest.mark.slow
@pytest.mark.parametrize(
    "layout", [["--mesh", "model=2"], ["--mesh", "data=2"], ["--mesh", "data=2", "--fsdp"]]
)
def test_two_processes_compute_what_one_process_with_the_same_mesh_does(
    stories_dataset, tmp_path, layout
):
    two = str(tmp_path / "two")
    results = _two_processes([_train_args(stories_dataset, two, *layout)] * 2)
    for r in results:
        assert r.returncode == 0, r.stderr[-3000:]
    one = str(tmp_path / "one")
    env = dict(
        os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS="--xla_force_host_platform_device_count=2"
    )
    single = subprocess.run(
        [sys.executable, *_train_args(stories_dataset, one, *layout)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert single.returncode == 0, single.stderr[-3000:]
    assert len(_losses(one)) == 8  # six steps and two evals
    np.testing.assert_allclose(_losses(two), _losses(one), rtol=1e-5)


_DISAGREEING = """
import sys
import jax
import numpy as np
sys.path.insert(0, ".")
jax.config.update("jax_cpu_collectives_implementation", "gloo")
jax.distributed.initialize(sys.argv[1], 2, int(sys.argv[2]))
from train.host_batches import FedBatches, settle
from train.mesh import HostShards
from train.processes import gather_int64
# both feed all rows, as with --mesh model=2
fed = FedBatches(HostShards((0,), 1), num_sources=0, rows=2)
fed.add({"inputs": np.full((2, 4), 7, np.int32)}, rows=True)
settle(gather_int64(fed.report()), 0, step=1)
fed.add({"inputs": np.full((2, 4), jax.process_index(), np.int32)}, rows=True)
try:
    settle(gather_int64(fed.report()), 0, step=2)
except ValueError as e:
    print("refused:", e)
"""


@pytest.mark.slow
def test_processes_that_feed_the_same_rows_differently_are_stopped_on_every_process():
    env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS="")
    address = f"127.0.0.1:{_free_port()}"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _DISAGREEING, address, str(i)],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]
    outputs = [p.communicate(timeout=300) for p in procs]
    for p, (out, err) in zip(procs, outputs):
        assert p.returncode == 0, err[-3000:]
        assert "refused: processes 0 and 1 feed the same rows of the global batch" in out
        assert "by step 2" in out


@pytest.mark.slow
def test_processes_started_with_different_settings_all_stop(stories_dataset, tmp_path):
    workdir = str(tmp_path / "run")
    results = _two_processes(
        [
            _train_args(stories_dataset, workdir),
            _train_args(stories_dataset, workdir, "--seed", "1"),
        ]
    )
    for r in results:
        assert r.returncode == 2, r.stderr[-3000:]  # a usage error, on every process
        assert r.stderr.strip().splitlines()[-1] == (
            "train: error: processes 0 and 1 were started with different settings; give every "
            "process the same flags"
        )
    assert not os.path.exists(os.path.join(workdir, "config.json"))


@pytest.mark.slow
def test_a_resume_refused_on_one_process_stops_all(stories_dataset, tmp_path):
    workdir = str(tmp_path / "run")
    first = _two_processes([_train_args(stories_dataset, workdir, "--steps", "3")] * 2)
    assert [r.returncode for r in first] == [0, 0], first[0].stderr[-3000:]
    resumed = _two_processes(
        [
            _train_args(stories_dataset, workdir),
            _train_args(stories_dataset, workdir, "--batch-size", "8"),
        ]
    )
    for r in resumed:
        assert r.returncode == 2, r.stderr[
            -3000:
        ]  # a usage error, told alike on the process that did not see it
        assert r.stderr.strip().splitlines()[-1] == (
            "train: error: --batch-size 8 differs from the saved run's 4; drop the flag or use "
            "another --workdir"
        )
    with open(os.path.join(workdir, "config.json")) as f:
        assert json.load(f)["steps"] == 3


def _one_process(workdir: str, data: str, devices: int, *extra: str) -> subprocess.CompletedProcess:
    env = dict(
        os.environ,
        JAX_PLATFORMS="cpu",
        XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}",
    )
    return subprocess.run(
        [sys.executable, *_train_args(data, workdir, *extra)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _fed(workdir: str) -> tuple[list[str], list[float]]:
    """Each step's global-batch digest and loss."""
    rows = [r for r in read_rows(os.path.join(workdir, METRICS_NAME)) if "loss" in r]
    return [r["batch_sha256"] for r in rows], [r["loss"] for r in rows]


@pytest.mark.slow
def test_one_device_eight_devices_and_two_processes_train_on_the_same_batches(
    stories_dataset, tmp_path
):
    runs = {
        "one": _one_process(str(tmp_path / "one"), stories_dataset, 1, "--packing", "document"),
        "eight": _one_process(
            str(tmp_path / "eight"),
            stories_dataset,
            8,
            "--packing",
            "document",
            "--mesh",
            "data=4,model=2",
        ),
    }
    two = _two_processes(
        [
            _train_args(
                stories_dataset, str(tmp_path / "two"), "--packing", "document", "--mesh", "data=2"
            )
        ]
        * 2
    )
    for name, r in [*runs.items(), ("two", two[0]), ("two", two[1])]:
        assert r.returncode == 0, (name, r.stderr[-3000:])
    digests, losses = _fed(str(tmp_path / "one"))
    assert len(digests) == 6
    for name in ("eight", "two"):
        other_digests, other_losses = _fed(str(tmp_path / name))
        assert other_digests == digests, name
        np.testing.assert_allclose(other_losses, losses, rtol=1e-5)


@pytest.mark.slow
def test_a_run_saved_on_two_processes_resumes_on_four_devices_and_on_one_with_the_same_batches(
    stories_dataset, tmp_path
):
    reference = str(tmp_path / "uninterrupted")
    assert _one_process(reference, stories_dataset, 1).returncode == 0
    digests, losses = _fed(reference)
    for devices, mesh in ((4, "data=4"), (1, "data=1")):
        workdir = str(tmp_path / f"resumed-{devices}")
        # --decay-steps keeps the uninterrupted run's learning-rate schedule.
        first = _two_processes(
            [
                _train_args(
                    stories_dataset,
                    workdir,
                    "--steps",
                    "3",
                    "--decay-steps",
                    "6",
                    "--mesh",
                    "data=2",
                )
            ]
            * 2
        )
        assert [r.returncode for r in first] == [0, 0], first[0].stderr[-3000:]
        resumed = _one_process(workdir, stories_dataset, devices, "--mesh", mesh)
        assert resumed.returncode == 0, resumed.stderr[-3000:]
        resumed_digests, resumed_losses = _fed(workdir)
        assert resumed_digests == digests
        np.testing.assert_allclose(resumed_losses, losses, rtol=2e-3)
