"""Prepare never hangs, never deletes what it did not write, never turns a passing fault into lost
data.

Every run here goes through the command line with Beam's default local settings (worker processes,
one per core), as a user runs it: failures that only show across processes show here.
"""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest
import zstandard

from pipeline.corpus import write_corpus
from schemas import formats
from support.corpora import sample_documents, write_jsonl, write_text
from support.fault_runs import fault_env, in_namespace
from support.runs import (
    REPO,
    cli,
    decoded_documents,
    files_in_place,
    one_line_error,
    run_command,
    run_outputs,
    tree_bytes,
)

pytestmark = pytest.mark.integration  # every test here runs a command, a process or training


def shards(root: str) -> dict[str, bytes]:
    return {k: v for k, v in tree_bytes(root).items() if k.startswith(formats.SPLITS)}


def test_a_truncated_compressed_file_fails_the_run_with_one_line_naming_it(tmp_path):
    docs = [f"doc {i} " + "text " * 50 for i in range(3000)]
    good = write_jsonl(str(tmp_path / "good.jsonl"), docs)
    full = gzip.compress(open(good, "rb").read(), mtime=0)
    (tmp_path / "cut.jsonl.gz").write_bytes(full[: len(full) // 2])
    out = str(tmp_path / "out")
    line = one_line_error(
        cli(
            "--input",
            good,
            "--input",
            str(tmp_path / "cut.jsonl.gz"),
            "--output",
            out,
            "--unit-bytes",
            "65536",
        )
    )
    assert "cut.jsonl.gz" in line and "truncated" in line
    assert not os.path.exists(os.path.join(out, formats.MANIFEST_NAME))


def test_a_failed_unit_stops_the_run_without_waiting_for_the_others_and_the_rerun_resumes(tmp_path):
    corpus = write_text(str(tmp_path / "c.txt"), sample_documents(600))
    # Two worker processes on any machine: the failing unit waits for another to be at work beside
    # it.
    args = ["--input", corpus, "--unit-bytes", "4096", "--direct_num_workers=2"]
    assert cli(*args, "--output", str(tmp_path / "clean")).returncode == 0
    out = tmp_path / "out"
    state = tmp_path / "faults"
    state.mkdir()
    # The second unit to start fails once a third has started; that one, and any after it, would
    # never end: the run ends only if it stops its job instead of waiting for it.
    try:
        result = cli(
            *args, "--output", str(out), env=fault_env(FAIL_UNIT="2", FAIL_STATE_DIR=str(state))
        )
    except subprocess.TimeoutExpired:
        pytest.fail("the run waited for the units at work after the failure, which never end")
    line = one_line_error(result)
    assert "injected failure" in line and "c.txt" in line
    assert (state / "held-3").exists(), (
        "the run ended before a unit was at work beside the failing one"
    )
    assert not [name for name in os.listdir(state) if name.startswith("late-")], (
        "a unit started after the failure"
    )
    assert not (out / formats.MANIFEST_NAME).exists()
    done = files_in_place(str(out / formats.STATE_DIR / formats.UNITS_DIR))
    assert done >= 1, "the unit finished before the failing one started is kept"
    # The rerun, with nothing changed and without --overwrite, resumes: only the units not done run.
    rerun = cli(*args, "--output", str(out))
    assert rerun.returncode == 0, rerun.stderr
    info = json.loads((out / formats.RUN_INFO_NAME).read_text())
    total = json.loads((tmp_path / "clean" / formats.MANIFEST_NAME).read_text())["num_units"]
    assert (info["units_resumed"], info["units_run"]) == (done, total - done)
    assert run_outputs(str(out)) == run_outputs(str(tmp_path / "clean"))


def test_verbose_shows_the_traceback(tmp_path):
    (tmp_path / "cut.jsonl.gz").write_bytes(gzip.compress(b'{"text": "x"}\n' * 1000, mtime=0)[:-12])
    result = cli(
        "--input", str(tmp_path / "cut.jsonl.gz"), "--output", str(tmp_path / "out"), "--verbose"
    )
    assert result.returncode == 1 and "Traceback" in result.stderr and "truncated" in result.stderr


def test_overwrite_deletes_only_what_prepare_wrote(tmp_path):
    corpus = write_text(str(tmp_path / "c.txt"), sample_documents(200))
    out = tmp_path / "out"
    assert (
        cli("--input", corpus, "--output", str(out), "--validation-fraction", "0.2").returncode == 0
    )
    (out / "train" / "notes.txt").write_text("someone else's")
    (out / "README").write_text("keep me")
    assert (
        cli("--input", corpus, "--output", str(out), "--seed", "3", "--overwrite").returncode == 0
    )
    assert (out / "train" / "notes.txt").read_text() == "someone else's"
    assert (out / "README").read_text() == "keep me"
    manifest = json.loads((out / formats.MANIFEST_NAME).read_text())
    listed = {s["path"] for s in manifest["shards"]}
    written = {p for p in tree_bytes(str(out)) if p.startswith(formats.SPLITS)}
    assert written == listed | {"train/notes.txt"}, (
        "an earlier run's shard was left, or a file lost"
    )
    assert "validation" not in manifest["totals"]


def test_an_input_inside_the_output_is_refused_before_anything_is_deleted(tmp_path):
    data = tmp_path / "data"
    (data / "train").mkdir(parents=True)
    corpus = write_text(str(data / "train" / "a.txt"), sample_documents(50))
    before = open(corpus, "rb").read()
    result = cli("--input", str(data / "train" / "*.txt"), "--output", str(data), "--overwrite")
    line = one_line_error(result)
    assert "inside the output directory" in line
    assert open(corpus, "rb").read() == before


@pytest.mark.slow
def test_paths_with_glob_characters_are_literal(tmp_path, encoding):
    document = "the one with brackets " * 20
    odd = write_text(str(tmp_path / "a[1].txt"), [document] * 300)
    write_text(str(tmp_path / "a1.txt"), ["a decoy"])  # what the pattern a[1].txt would match
    out = str(tmp_path / "out[1]")
    assert cli("--input", odd, "--output", out, "--unit-bytes", "4096").returncode == 0
    assert decoded_documents(out, encoding) == [document.strip()] * 300
    # A rerun into the bracketed output finds its own complete state.
    again = cli("--input", odd, "--output", out, "--unit-bytes", "4096")
    assert again.returncode == 0 and "already complete" in again.stderr
    # Globs still expand.
    assert (
        cli("--input", str(tmp_path / "a?.txt"), "--output", str(tmp_path / "glob")).returncode == 0
    )
    assert decoded_documents(str(tmp_path / "glob"), encoding) == ["a decoy"]


@pytest.mark.parametrize("suffix", ["gz", "zst"])
@pytest.mark.slow
def test_trailing_zero_padding_is_accepted(tmp_path, suffix):
    docs = sample_documents(300)
    plain = write_jsonl(str(tmp_path / "c.jsonl"), docs)
    data = open(plain, "rb").read()
    packed = (
        gzip.compress(data, mtime=0)
        if suffix == "gz"
        else zstandard.ZstdCompressor().compress(data)
    )
    (tmp_path / f"padded.jsonl.{suffix}").write_bytes(packed + b"\x00" * 5000)
    assert cli("--input", plain, "--output", str(tmp_path / "plain")).returncode == 0
    assert (
        cli(
            "--input",
            str(tmp_path / f"padded.jsonl.{suffix}"),
            "--output",
            str(tmp_path / "padded"),
        ).returncode
        == 0
    )
    assert shards(str(tmp_path / "plain")) == shards(str(tmp_path / "padded"))
    # Non-zero bytes after the padding are corrupt data, not padding.
    (tmp_path / f"bad.jsonl.{suffix}").write_bytes(packed + b"\x00" * 10 + b"junk")
    assert "corrupt" in one_line_error(
        cli("--input", str(tmp_path / f"bad.jsonl.{suffix}"), "--output", str(tmp_path / "bad"))
    )


def test_a_misspelt_option_is_refused_with_a_suggestion(tmp_path):
    corpus = write_text(str(tmp_path / "c.txt"), ["one"])
    line = one_line_error(
        cli("--input", corpus, "--output", str(tmp_path / "o"), "--validation_fraction", "0.1"), 2
    )
    assert "--validation_fraction" in line and "did you mean --validation-fraction" in line
    assert not (tmp_path / "o").exists()


def test_a_default_run_prints_only_its_own_lines(tmp_path):
    corpus = write_text(str(tmp_path / "c.txt"), sample_documents(100))
    result = cli("--input", corpus, "--output", str(tmp_path / "o"))
    assert result.returncode == 0, result.stderr
    lines = result.stderr.strip().splitlines()
    assert lines[0].startswith("prepare: ") and lines[-1].strip().endswith("tokens/s overall")
    ours = ("prepare: ", "units ", "wrote ", "  ")
    assert all(line.startswith(ours) for line in lines), result.stderr


def test_a_complete_run_leaves_no_scratch(tmp_path):
    corpus = write_text(str(tmp_path / "c.txt"), sample_documents(300))
    out = tmp_path / "out"
    assert cli("--input", corpus, "--output", str(out), "--unit-bytes", "4096").returncode == 0
    # Scratch files that killed writers would leave beside a shard and beside the manifest.
    (out / "train" / ".partial-x1y2z3").write_bytes(b"half a shard")
    (out / ".manifest.json.tmp-0123").write_bytes(b"half a manifest")
    assert (
        cli(
            "--input", corpus, "--output", str(out), "--unit-bytes", "8192", "--overwrite"
        ).returncode
        == 0
    )
    hidden = [p for p in tree_bytes(str(out)) if any(part.startswith(".") for part in p.split("/"))]
    assert hidden == []


def test_unit_records_of_another_plan_are_redone(tmp_path):
    from pipeline.prepare import launcher
    from pipeline.prepare.units import UnitResult

    corpus = write_text(str(tmp_path / "c.txt"), sample_documents(300))
    out = str(tmp_path / "out")
    args = [
        "--input",
        corpus,
        "--output",
        out,
        "--unit-bytes",
        "4096",
        "--direct_running_mode=in_memory",
        "--direct_num_workers=1",
    ]
    clean = launcher.run(args[:3] + [str(tmp_path / "clean")] + args[4:])
    # Stop after planning: a plan is there, then a forged record claims unit 0 for another plan.
    state = os.path.join(out, formats.STATE_DIR)
    launcher_plan = launcher.make_plan([corpus], launcher._config(launcher.parse_args(args)[0]))
    os.makedirs(os.path.join(state, formats.UNITS_DIR))
    with open(os.path.join(state, formats.PLAN_NAME), "w") as f:
        f.write(launcher_plan.to_json())
    forged = UnitResult(0, "0" * 64, (), {}, {}, "0" * 64, 0, {}, 0.0, 0)
    with open(os.path.join(state, formats.UNITS_DIR, "00000.json"), "w") as f:
        f.write(forged.to_json())
    manifest = launcher.run(args)
    assert manifest.to_json() == clean.to_json()


def test_manifest_shard_paths_must_stay_inside_the_dataset(tmp_path):
    from pipeline.load import LoaderError, open_prepared

    corpus = write_text(str(tmp_path / "c.txt"), sample_documents(100))
    out = tmp_path / "out"
    assert cli("--input", corpus, "--output", str(out)).returncode == 0
    manifest = json.loads((out / formats.MANIFEST_NAME).read_text())
    for bad in ("../../etc/passwd", "/etc/passwd", "train/../../x", "train/.hidden"):
        manifest["shards"][0]["path"] = bad
        (out / formats.MANIFEST_NAME).write_text(json.dumps(manifest))
        assert run_command("verify", str(out)) == 1  # a damaged manifest: the run fails
        with pytest.raises(LoaderError, match="shards/0/path"):
            open_prepared(str(out))


def _flaky_env(tmp_path, failures: int) -> dict:
    state = tmp_path / f"flaky-{failures}-{time.monotonic_ns()}"
    state.mkdir()
    return fault_env(FLAKY_STATE_DIR=str(state), FLAKY_FAILURES=str(failures))


@pytest.mark.slow
def test_transient_read_errors_are_retried_and_persistent_ones_fail_the_unit(tmp_path):
    corpus = write_text(str(tmp_path / "c.txt"), sample_documents(400))
    assert (
        cli(
            "--input", corpus, "--output", str(tmp_path / "clean"), "--unit-bytes", "8192"
        ).returncode
        == 0
    )
    flaky = f"flaky://{corpus}"

    # Two failed reads: retried within the unit, the output is that of a clean run.
    result = cli(
        "--input",
        flaky,
        "--output",
        str(tmp_path / "retried"),
        "--unit-bytes",
        "8192",
        "--skip-bad-files",
        env=_flaky_env(tmp_path, 2),
    )
    assert result.returncode == 0, result.stderr
    assert shards(str(tmp_path / "retried")) == shards(str(tmp_path / "clean"))
    assert json.loads((tmp_path / "retried" / formats.MANIFEST_NAME).read_text())["skipped"] == {}

    # Reads that keep failing fail the unit even with --skip-bad-files: nothing is recorded as
    # skipped.
    out = str(tmp_path / "failed")
    line = one_line_error(
        cli(
            "--input",
            flaky,
            "--output",
            out,
            "--unit-bytes",
            "8192",
            "--skip-bad-files",
            env=_flaky_env(tmp_path, 1000),
        )
    )
    assert "Connection reset" in line and "rerun" in line
    assert not os.path.exists(os.path.join(out, formats.MANIFEST_NAME))
    # ... so a rerun, once the fault has passed, tries those units again and completes.
    result = cli(
        "--input",
        flaky,
        "--output",
        out,
        "--unit-bytes",
        "8192",
        "--skip-bad-files",
        env=_flaky_env(tmp_path, 0),
    )
    assert result.returncode == 0, result.stderr
    assert shards(out) == shards(str(tmp_path / "clean"))


@pytest.mark.slow
def test_a_killed_worker_process_costs_only_its_unit(tmp_path):
    corpus = str(tmp_path / "stories.txt")
    write_corpus(corpus, 30000, seed=4)
    args = ["--input", corpus, "--unit-bytes", "262144", "--validation-fraction", "0.05"]
    assert cli(*args, "--output", str(tmp_path / "clean")).returncode == 0
    out = tmp_path / "out"
    units = out / formats.STATE_DIR / formats.UNITS_DIR
    process = subprocess.Popen(
        [sys.executable, "-m", "pipeline", "prepare", *args, "--output", str(out)],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 120
    killed = None
    while killed is None and time.monotonic() < deadline:
        # The launcher's child is the job; the job's children are its worker processes.
        workers = [w for job in psutil.Process(process.pid).children() for w in job.children()]
        if workers and units.is_dir() and len(os.listdir(units)) >= 2:
            killed = workers[0]
            killed.send_signal(signal.SIGKILL)
        time.sleep(0.01)
    assert killed is not None, "no worker to kill"
    _, stderr = process.communicate(timeout=300)
    assert process.returncode == 0, stderr
    info = json.loads((out / formats.RUN_INFO_NAME).read_text())
    assert info["job_restarts"] >= 1
    assert run_outputs(str(out)) == run_outputs(str(tmp_path / "clean"))


@pytest.mark.slow
def test_a_full_disk_fails_clearly_and_the_run_resumes_once_there_is_room(tmp_path):
    corpus = str(tmp_path / "stories.txt")
    write_corpus(corpus, 20000, seed=5)
    args = f"--input {corpus} --unit-bytes 262144"
    assert cli(*args.split(), "--output", str(tmp_path / "clean")).returncode == 0
    disk = tmp_path / "disk"
    disk.mkdir()
    prepare = f"{sys.executable} -m pipeline prepare {args} --output {disk}/out"
    result = in_namespace(
        f"mount -t tmpfs -o size=1m tmpfs {disk} && {prepare} 2> {tmp_path}/full.log; "
        f"echo $? > {tmp_path}/full.rc; "
        f"mount -o remount,size=64m {disk} && {prepare} && cp -r {disk}/out {tmp_path}/resumed",
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "full.rc").read_text().strip() == "1"
    full = subprocess.CompletedProcess([], 1, "", (tmp_path / "full.log").read_text())
    assert "No space left on device" in one_line_error(full)
    info = json.loads((tmp_path / "resumed" / formats.RUN_INFO_NAME).read_text())
    assert info["units_resumed"] > 0
    assert run_outputs(str(tmp_path / "resumed")) == run_outputs(str(tmp_path / "clean"))


@pytest.mark.slow
def test_a_read_only_output_gives_one_clear_line(tmp_path):
    corpus = write_text(str(tmp_path / "c.txt"), sample_documents(50))
    disk = tmp_path / "disk"
    disk.mkdir()
    result = in_namespace(
        f"mount -t tmpfs -o ro tmpfs {disk} && "
        f"{sys.executable} -m pipeline prepare --input {corpus} --output {disk}/out",
        timeout=300,
    )
    line = one_line_error(result)
    assert "Read-only file system" in line and str(disk) in line


def _peak_rss_of_tree(args: list[str]) -> tuple[subprocess.CompletedProcess, int]:
    """Runs prepare; the largest peak RSS of its processes (launcher, job, workers), as the
    kernel counts it for every descendant once reaped."""
    script = (
        "import resource, subprocess, sys; "
        "r = subprocess.run(sys.argv[1:], capture_output=True, text=True); "
        "sys.stderr.write(r.stderr); "
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024); "
        "sys.exit(r.returncode)"
    )
    result = subprocess.run(
        [sys.executable, "-c", script, sys.executable, "-m", "pipeline", "prepare", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    return result, int(result.stdout.split()[-1])


@pytest.mark.slow
def test_a_300_mib_line_in_a_gzip_file_is_never_held(tmp_path):
    import zlib

    path = tmp_path / "huge.jsonl.gz"
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)
    with open(path, "wb") as f:
        f.write(compressor.compress(b'{"text": "short one"}\n{"text": "'))
        for _ in range(300):
            f.write(compressor.compress(b"a" * 2**20))
        f.write(compressor.compress(b'"}\n{"text": "short two"}\n') + compressor.flush())
    assert path.stat().st_size < 2**20
    out = str(tmp_path / "out")
    result, peak = _peak_rss_of_tree(["--input", str(path), "--output", out])
    assert result.returncode == 0, result.stderr
    manifest = json.loads(open(os.path.join(out, formats.MANIFEST_NAME)).read())
    assert manifest["skipped"] == {"line_too_long": 1}
    assert manifest["totals"]["train"]["documents"] == 2
    info = json.loads(open(os.path.join(out, formats.RUN_INFO_NAME)).read())
    # Forked workers outlive the job that is stopped once its units are done, so the kernel's count
    # may miss them: each worker measures its own.
    peaks = {
        "all": peak,
        "launcher": info["launcher_peak_rss_bytes"],
        "workers": info["workers_peak_rss_bytes"],
    }
    print("peak RSS: " + ", ".join(f"{k} {v / 2**20:.0f} MiB" for k, v in peaks.items()))
    assert max(peaks.values()) < 2**30, peaks
    # Beyond what the launcher holds (Beam, the tokenizer), a worker holds at most the line bound
    # (4 x --max-document-bytes: 256 MiB) of the line, once.
    assert peaks["workers"] - peaks["launcher"] < 320 * 2**20, peaks


_FOREIGN_CALLER = """
import grpc
from apache_beam.portability.api import beam_fn_api_pb2, beam_fn_api_pb2_grpc
from pipeline.prepare.execution.forked_workers import ForkedWorkers

workers = ForkedWorkers(1)
try:
    stub = beam_fn_api_pb2_grpc.BeamFnExternalWorkerPoolStub(grpc.insecure_channel(workers.address))
    def start(params):
        request = beam_fn_api_pb2.StartWorkerRequest(worker_id="w", params=params)
        request.control_endpoint.url = "127.0.0.1:9"
        return stub.StartWorker(request, timeout=30).error
    print(repr(start({})))
    own = dict(workers.environment().params or {})
    print(repr(start({name: "guessed" for name in own})))
    print(repr(start(own)))
finally:
    workers.close()
"""


def test_the_forked_worker_pool_refuses_a_caller_without_its_secret():
    result = subprocess.run(
        [sys.executable, "-c", _FOREIGN_CALLER],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    no_secret, wrong_secret, own = result.stdout.splitlines()
    assert "refused" in no_secret and "refused" in wrong_secret
    assert own == "''", "the job's own runner gets its worker"
