"""Whole runs of prepare: determinism, resume after SIGKILL, refusing mismatched reruns, CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from array_record.python.array_record_module import ArrayRecordReader

from pipeline.corpus import write_corpus
from pipeline.prepare.launcher import PrepareError
from schemas import formats
from support.fault_runs import fault_env, kill_prepare_part_way
from support.runs import (
    REPO,
    decoded_documents,
    files_in_place,
    run_outputs,
    run_prepare,
    tree_bytes,
)


@pytest.fixture(scope="module")
def stories(tmp_path_factory) -> str:
    path = str(tmp_path_factory.mktemp("corpus") / "stories.txt")
    write_corpus(path, 6000, seed=1)
    return path


@pytest.mark.integration
def test_same_output_in_process_and_with_two_worker_processes(stories, tmp_path):
    common = ["--unit-bytes", "65536", "--validation-fraction", "0.1"]
    run_prepare([stories], str(tmp_path / "a"), *common)
    run_prepare(
        [stories],
        str(tmp_path / "b"),
        *common,
        "--direct_num_workers=2",
        "--direct_running_mode=multi_processing",
    )
    a, b = run_outputs(str(tmp_path / "a")), run_outputs(str(tmp_path / "b"))
    assert sorted(a) == sorted(b)
    assert a == b
    manifest = json.loads(a[formats.MANIFEST_NAME])
    assert manifest["num_units"] > 4 and len(manifest["shards"]) > 8


@pytest.mark.integration
def test_output_depends_on_config_seed(stories, tmp_path):
    run_prepare([stories], str(tmp_path / "a"), "--seed", "1")
    run_prepare([stories], str(tmp_path / "b"), "--seed", "2")
    a, b = run_outputs(str(tmp_path / "a")), run_outputs(str(tmp_path / "b"))
    shard = next(k for k in a if k.startswith("train/"))
    assert a[shard] != b[shard], "the seed shuffles documents within units"


@pytest.mark.integration
def test_rerun_of_complete_output_does_nothing_and_mismatch_is_refused(stories, tmp_path):
    out = str(tmp_path / "out")
    run_prepare([stories], out)
    before = tree_bytes(out)
    run_prepare([stories], out)
    assert tree_bytes(out) == before
    with pytest.raises(PrepareError, match=r"different config \(record_tokens\).*--overwrite"):
        run_prepare([stories], out, "--record-tokens", "1024")
    run_prepare([stories], out, "--record-tokens", "1024", "--overwrite")
    assert (
        json.loads(open(os.path.join(out, formats.MANIFEST_NAME)).read())["config"]["record_tokens"]
        == 1024
    )


@pytest.mark.integration
def test_changed_input_is_refused(tmp_path):
    corpus = str(tmp_path / "c.txt")
    write_corpus(corpus, 50, seed=0)
    out = str(tmp_path / "out")
    run_prepare([corpus], out)
    write_corpus(corpus, 51, seed=0)
    with pytest.raises(PrepareError, match="different inputs"):
        run_prepare([corpus], out)


def test_non_empty_foreign_directory_is_refused(tmp_path, stories):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "precious.txt").write_text("keep me")
    with pytest.raises(PrepareError, match="not empty"):
        run_prepare([stories], str(tmp_path / "out"))


def _cli(*args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pipeline", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        **kwargs,
    )


@pytest.mark.integration
def test_expected_failures_are_one_line(tmp_path):
    result = _cli(
        "prepare", "--input", str(tmp_path / "missing.txt"), "--output", str(tmp_path / "o")
    )
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1].startswith("prepare: error: no input matches")
    assert "Traceback" not in result.stderr


@pytest.mark.integration
def test_verify_names_bad_and_missing_shards(stories, tmp_path):
    out = str(tmp_path / "out")
    manifest = run_prepare([stories], out, "--unit-bytes", "65536")
    assert _cli("verify", out).returncode == 0
    first, second = manifest.shards[0].path, manifest.shards[1].path
    with open(os.path.join(out, first), "r+b") as f:
        f.seek(100)
        byte = f.read(1)
        f.seek(100)
        f.write(bytes([byte[0] ^ 0xFF]))
    os.remove(os.path.join(out, second))
    result = _cli("verify", out)
    assert result.returncode == 1
    assert f"damaged: {first} does not hold the bytes its manifest names" in result.stdout
    assert f"missing: {second}" in result.stdout
    assert f"{first}, {second};" in result.stderr.strip().splitlines()[-1]


@pytest.mark.integration
def test_inspect_prints_totals_histogram_and_documents(stories, tmp_path, encoding):
    out = str(tmp_path / "out")
    run_prepare([stories], out)
    result = _cli("inspect", out, "--documents", "2")
    assert result.returncode == 0, result.stderr
    assert "train: 6000 documents" in result.stdout
    assert result.stdout.count("--- document") == 2
    # The split's first two documents, whole, as the shards hold them: stories of the input.
    corpus = open(stories, encoding="utf-8").read()
    for i, text in enumerate(decoded_documents(out, encoding)[:2]):
        assert len(text) > 100 and f"{text}\n<|endoftext|>" in corpus
        tokens = len(encoding.encode_ordinary(text)) + 1  # and its end-of-text id
        assert f"--- document {i} ({tokens} tokens) ---\n{text}\n" in result.stdout


@pytest.mark.slow
def test_sigkill_then_resume_redoes_only_unfinished_units(tmp_path):
    corpus = str(tmp_path / "stories.txt")
    write_corpus(corpus, 40000, seed=3)
    args = ["--input", corpus, "--unit-bytes", "262144", "--validation-fraction", "0.05"]
    clean = str(tmp_path / "clean")
    run_prepare([corpus], clean, *args[2:])

    out = str(tmp_path / "killed")
    units_dir = os.path.join(out, formats.STATE_DIR, formats.UNITS_DIR)
    kill_prepare_part_way(
        [
            *args,
            "--output",
            out,
            "--direct_num_workers=2",
            "--direct_running_mode=multi_processing",
        ],
        after=3,
    )
    done = files_in_place(units_dir)
    total = json.loads(open(os.path.join(out, formats.STATE_DIR, formats.PLAN_NAME)).read())[
        "units"
    ]
    assert 0 < done <= 3 < len(total), "the kill lands part-way"
    assert not os.path.exists(os.path.join(out, formats.MANIFEST_NAME))
    # Whatever is visible under a shard name is a complete ArrayRecord file.
    for split in formats.SPLITS:
        for name in (
            os.listdir(os.path.join(out, split)) if os.path.isdir(os.path.join(out, split)) else []
        ):
            if not name.startswith("."):
                ArrayRecordReader(os.path.join(out, split, name)).close()

    run_prepare([corpus], out, *args[2:])
    info = json.loads(open(os.path.join(out, formats.RUN_INFO_NAME)).read())
    assert info["units_resumed"] == done
    assert info["units_run"] == len(total) - done
    assert run_outputs(out) == run_outputs(clean)


def test_local_runner_options():
    from apache_beam.options.pipeline_options import DirectOptions, WorkerOptions

    from pipeline.prepare.execution.beam_options import pipeline_options

    local = pipeline_options([])
    assert local.view_as(DirectOptions).direct_num_workers == os.cpu_count()
    assert local.view_as(DirectOptions).direct_running_mode == "multi_processing"
    assert local.view_as(WorkerOptions).default_sdk_harness_log_level == "WARNING"
    assert (
        pipeline_options(["--direct_num_workers=1"]).view_as(DirectOptions).direct_num_workers == 1
    )


# A pipeline on Beam's own DirectRunner, unpinned, in a spawned process.
_UNPINNED_IN_A_SPAWNED_CHILD = """
import multiprocessing

def run():
    import apache_beam as beam
    with beam.Pipeline(runner="DirectRunner") as pipeline:
        pipeline | beam.Create([1, 2]) | beam.Map(lambda x: x + 1)

if __name__ == "__main__":
    child = multiprocessing.get_context("spawn").Process(target=run)
    child.start()
    child.join()
    raise SystemExit(child.exitcode)
"""

# The launcher of a process that has run JAX: the watched job then starts in a fresh interpreter.
_AFTER_JAX = (
    "import sys, jax; jax.numpy.zeros(1).block_until_ready(); "
    "from pipeline.prepare import launcher; launcher.run(sys.argv[1:])"
)


@pytest.fixture(scope="module")
def prism_stand_in(tmp_path_factory) -> None:
    """Checks that the stand-in for Prism (tests/support/faults/prism.py) reaches a spawned process,
    and that Beam's DirectRunner tries Prism first: the test below means nothing otherwise."""
    root = tmp_path_factory.mktemp("prism")
    (root / "unpinned.py").write_text(_UNPINNED_IN_A_SPAWNED_CHILD)
    control = subprocess.run(
        [sys.executable, str(root / "unpinned.py")],
        cwd=REPO,
        capture_output=True,
        text=True,
        env=fault_env(PRISM_STATE_DIR=str(root)),
        timeout=300,
    )
    assert control.returncode == 0, control.stderr
    assert (root / "tried").exists(), (
        "the stand-in does not reach a spawned process, or Beam no longer tries Prism"
    )


@pytest.mark.integration
@pytest.mark.parametrize("job_start", ["fork", "spawn"])
def test_the_local_runner_is_pinned_and_never_fetches_prism(prism_stand_in, tmp_path, job_start):
    # Beam's DirectRunner first tries to download and start its Prism binary, and falls back only
    # when that fails: with network access the run would happen on another runner. The stand-in
    # for Prism, installed in every process of the run as it starts, records whether it was tried,
    # in the job whether it is forked or spawned (as it is once the launcher has run JAX).
    state = tmp_path / "prism"
    state.mkdir()
    corpus = str(tmp_path / "c.txt")
    write_corpus(corpus, 50, seed=0)
    args = ["--input", corpus, "--output", str(tmp_path / "out"), "--runner=DirectRunner"]
    launch = ["-m", "pipeline", "prepare"] if job_start == "fork" else ["-c", _AFTER_JAX]
    result = subprocess.run(
        [sys.executable, *launch, *args],
        cwd=REPO,
        env=fault_env(PRISM_STATE_DIR=str(state)),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    if job_start == "spawn":
        interpreters = [name for name in os.listdir(state) if name.startswith("interpreter-")]
        assert len(interpreters) >= 2, "the job was not started in a fresh interpreter"
    assert (
        json.loads((tmp_path / "out" / formats.MANIFEST_NAME).read_text())["totals"]["train"][
            "documents"
        ]
        == 50
    )
    assert not (state / "tried").exists(), "the run tried Prism"
