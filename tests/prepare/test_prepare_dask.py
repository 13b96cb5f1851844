"""Prepare on a dask.distributed cluster through Beam's own DaskRunner: a scheduler and two worker
processes on the loopback, started and stopped here, run the same units to the same bytes."""

from __future__ import annotations

import gzip
import json
import os
import time

import pytest

from pipeline.corpus import write_corpus
from pipeline.prepare import launcher
from schemas import formats
from schemas.errors import UsageError
from support.corpora import write_jsonl
from support.fault_runs import kill_prepare_when
from support.runs import cli, files_in_place, one_line_error, run_outputs, run_prepare

DASK_RUNNER = "--runner=apache_beam.runners.dask.dask_runner.DaskRunner"


def test_options_of_a_runner_named_by_its_module_are_known():
    _, beam_args = launcher.parse_args(
        ["--input", "x", "--output", "y", DASK_RUNNER, "--dask_client_address=127.0.0.1:8786"]
    )
    assert "--dask_client_address=127.0.0.1:8786" in beam_args
    with pytest.raises(UsageError, match="did you mean --dask_client_address"):
        launcher.parse_args(
            ["--input", "x", "--output", "y", DASK_RUNNER, "--dask_client_adress=127.0.0.1:8786"]
        )


@pytest.fixture(scope="module")
def scheduler():
    """A scheduler and two single-threaded worker processes, all on 127.0.0.1."""
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=None
    ) as cluster:
        yield cluster.scheduler_address


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> str:
    path = str(tmp_path_factory.mktemp("dask") / "stories.txt")
    write_corpus(path, 12000, seed=11)
    return path


ARGS = ["--unit-bytes", "65536", "--validation-fraction", "0.05"]


@pytest.mark.slow
def test_dask_writes_the_same_bytes_as_the_local_runner(scheduler, corpus, tmp_path):
    run_prepare([corpus], str(tmp_path / "local"), *ARGS)
    out = str(tmp_path / "dask")
    result = cli(
        "--input",
        corpus,
        "--output",
        out,
        *ARGS,
        DASK_RUNNER,
        f"--dask_client_address={scheduler}",
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert run_outputs(out) == run_outputs(str(tmp_path / "local"))
    assert json.loads(open(os.path.join(out, formats.RUN_INFO_NAME)).read())["runner"].endswith(
        "DaskRunner"
    )


@pytest.mark.slow
def test_dask_resumes_after_the_launcher_is_killed(scheduler, corpus, tmp_path):
    clean = str(tmp_path / "clean")
    run_prepare([corpus], clean, *ARGS)
    out = str(tmp_path / "killed")
    args = [
        "--input",
        corpus,
        "--output",
        out,
        *ARGS,
        DASK_RUNNER,
        f"--dask_client_address={scheduler}",
    ]
    units_dir = os.path.join(out, formats.STATE_DIR, formats.UNITS_DIR)
    kill_prepare_when(args, done=lambda: files_in_place(units_dir), at_least=2)
    assert not os.path.exists(os.path.join(out, formats.MANIFEST_NAME))
    result = cli(*args, timeout=300)
    assert result.returncode == 0, result.stderr
    assert run_outputs(out) == run_outputs(clean)


@pytest.mark.slow
def test_a_failed_unit_on_dask_stops_the_run_with_one_line(scheduler, tmp_path):
    good = write_jsonl(
        str(tmp_path / "good.jsonl"), [f"doc {i} " + "text " * 50 for i in range(3000)]
    )
    full = gzip.compress(open(good, "rb").read(), mtime=0)
    (tmp_path / "cut.jsonl.gz").write_bytes(full[: len(full) // 2])
    out = str(tmp_path / "out")
    started = time.monotonic()
    result = cli(
        "--input",
        good,
        "--input",
        str(tmp_path / "cut.jsonl.gz"),
        "--output",
        out,
        "--unit-bytes",
        "65536",
        DASK_RUNNER,
        f"--dask_client_address={scheduler}",
        timeout=300,
    )
    assert time.monotonic() - started < 120
    line = one_line_error(result)
    assert "cut.jsonl.gz" in line and "truncated" in line
    assert not os.path.exists(os.path.join(out, formats.MANIFEST_NAME))
