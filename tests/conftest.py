"""Shared test helpers: small corpora in every format, and running `prepare` in-process."""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

import numpy as np
import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FAULTS = os.path.join(REPO, "tests", "faults")
# Tests import the project from the checkout, installed or not.
sys.path.insert(0, REPO)

from pipeline.cli import commands  # noqa: E402
from pipeline.dataset.manifest_io import read_manifest, read_records  # noqa: E402
from pipeline.prepare import launcher  # noqa: E402
from schemas import formats  # noqa: E402
from schemas.manifest import Manifest  # noqa: E402

@pytest.fixture(scope="session", autouse=True)
def index_cache(tmp_path_factory) -> str:
    """The loader's lengths cache in a temporary directory, for this process and those it starts."""
    from pipeline.load.lengths import CACHE_ENV

    path = str(tmp_path_factory.mktemp("lengths"))
    os.environ[CACHE_ENV] = path
    return path


# Fixtures shared by several modules: the hub stand-in, the clean worker environment.
pytest_plugins = ("hub_standin", "worker_venv")

# One worker in-process: fast to start. Determinism tests compare it with multi-process runs.
IN_PROCESS = ["--direct_num_workers=1", "--direct_running_mode=in_memory"]


def run_prepare(inputs: list[str], output: str, *extra: str) -> Manifest:
    argv = [a for path in inputs for a in ("--input", path)] + ["--output", output, *extra]
    if not any(a.startswith("--direct_") for a in extra):
        argv += IN_PROCESS
    return launcher.run(argv)


def run_command(name: str, *argv: str) -> int:
    """A `tokshards` command run in this process as the console script runs it: its exit status, and
    its error line on stderr. The interrupt handling it installs is undone after it."""
    handler, hook = signal.getsignal(signal.SIGINT), sys.unraisablehook
    try:
        return commands.run_command(name, list(argv), f"tokshards {name}")
    finally:
        signal.signal(signal.SIGINT, handler)
        sys.unraisablehook = hook


def read_split(output: str, split: str = "train") -> list[np.ndarray]:
    """Every record of a split, in manifest order."""
    return read_records(output, read_manifest(output), split)


def decoded_documents(output: str, encoding, split: str = "train") -> list[str]:
    """Documents decoded back from a split's records, in stored order."""
    records = read_split(output, split)
    if not records:
        return []
    tokens = np.concatenate(records)
    eot = encoding.eot_token
    ends = np.flatnonzero(tokens == eot)
    assert len(ends) and ends[-1] == len(tokens) - 1, "every split must end with an end-of-text token"
    starts = np.concatenate(([0], ends[:-1] + 1))
    return [encoding.decode(tokens[a:b].tolist()) for a, b in zip(starts, ends)]


def tree_bytes(root: str) -> dict[str, bytes]:
    """Relative path -> content for every file, to compare two output directories exactly."""
    out = {}
    for dirpath, _, files in os.walk(root):
        for name in files:
            path = os.path.join(dirpath, name)
            out[os.path.relpath(path, root)] = open(path, "rb").read()
    return out


def files_in_place(directory: str) -> int:
    """Files written whole in `directory`, not the dot-named temporaries of ones being written."""
    return len([n for n in os.listdir(directory) if not n.startswith(".")]) if os.path.isdir(directory) else 0


def fault_env(env: dict[str, str] | None = None, **faults: str) -> dict[str, str]:
    """`env` (this process's by default) with `faults` set and tests/faults/ on PYTHONPATH, so that
    every Python process of a run started with it installs them as it starts (see its sitecustomize)."""
    env = dict(os.environ if env is None else env)
    return {**env, "PYTHONPATH": os.pathsep.join([FAULTS, env.get("PYTHONPATH", "")]), **faults}


def _prepare_starting_units(args: list[str], *, in_pass: str, env: dict[str, str] | None, timeout: float,
                            **faults: str) -> tuple[subprocess.CompletedProcess, int, bool]:
    """Runs `python -m pipeline prepare ARGS` in a process group of its own with tests/faults/unit_starts.py
    installed for the pass `in_pass`; returns the run, how many units started the pass, and whether
    the run was killed."""
    with tempfile.TemporaryDirectory() as state:
        command = [sys.executable, "-m", "pipeline", "prepare", *args]
        process = subprocess.Popen(command, cwd=REPO, env=fault_env(env, UNITS_PASS=in_pass, UNITS_STATE_DIR=state, **faults),
                                   start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            _, stderr = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
            raise
        names = os.listdir(state)
        run = subprocess.CompletedProcess(command, process.returncode, "", stderr)
        return run, len([n for n in names if n.startswith("started-")]), "killed" in names


def kill_prepare_part_way(args: list[str], *, after: int, in_pass: str = "units", env: dict[str, str] | None = None,
                          timeout: float = 300) -> None:
    """Runs `python -m pipeline prepare ARGS` until a fault SIGKILLs its whole process group (the
    launcher and its workers) as a unit starts the pass `in_pass` ("cleaning" or "units") after
    `after` others have: then between 1 and `after` units have a record, given `after` at least the
    number of worker processes, however loaded the machine is."""
    run, _, killed = _prepare_starting_units(args, in_pass=in_pass, env=env, timeout=timeout, KILL_AFTER=str(after))
    assert killed, f"the run ended before unit {after + 1} started its {in_pass} pass: {run.stderr[-2000:]}"


def units_started(args: list[str], *, in_pass: str = "units", env: dict[str, str] | None = None,
                  timeout: float = 300) -> int:
    """Runs `python -m pipeline prepare ARGS` to a successful end; returns how many units started
    the pass `in_pass` (a unit resumed from an earlier run's record does not)."""
    run, started, _ = _prepare_starting_units(args, in_pass=in_pass, env=env, timeout=timeout)
    assert run.returncode == 0, run.stderr[-2000:]
    return started


def kill_prepare_when(args: list[str], *, done: Callable[[], int], at_least: int, timeout: float = 120,
                      poll: float = 0.005, env: dict[str, str] | None = None) -> None:
    """Starts `python -m pipeline prepare ARGS` in a process group of its own and SIGKILLs the whole
    group (the launcher and its workers) once `done()` counts `at_least`, or after `timeout`: for runs
    whose units run outside the launcher's processes (a Dask cluster's), where no fault reaches;
    elsewhere `kill_prepare_part_way` kills at a named point instead, whatever the timing."""
    process = subprocess.Popen([sys.executable, "-m", "pipeline", "prepare", *args], cwd=REPO, env=env,
                               start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and done() < at_least:
        time.sleep(poll)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def run_outputs(root: str) -> dict[str, bytes]:
    """`tree_bytes` but run_info.json, which alone may differ between equal runs."""
    files = tree_bytes(root)
    files.pop(formats.RUN_INFO_NAME)
    return files


def sample_documents(n: int, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    words = ["the", "cat", "sat", "on", "a", "mat", "Ünïcödé", "日本語", "emoji 🙂", "tab\there", "<|endoftext|>"]
    docs = []
    for _ in range(n):
        k = int(rng.integers(2, 60))
        docs.append(" ".join(words[i] for i in rng.integers(0, len(words), k)))
    return docs


def write_text(path: str, docs: list[str], separator: str = "<|endoftext|>") -> str:
    with open(path, "w", encoding="utf-8", newline="") as f:
        for d in docs:
            f.write(f"{d}\n{separator}\n")
    return path


def write_jsonl(path: str, docs: list[str], field: str = "text") -> str:
    lines = "".join(json.dumps({field: d, "id": i}) + "\n" for i, d in enumerate(docs)).encode()
    if path.endswith(".gz"):
        lines = gzip.compress(lines, mtime=0)
    elif path.endswith(".zst"):
        import zstandard

        lines = zstandard.ZstdCompressor().compress(lines)
    with open(path, "wb") as f:
        f.write(lines)
    return path


def write_parquet(path: str, docs: list[str], row_group_size: int = 50) -> str:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"text": docs, "id": list(range(len(docs)))}), path, row_group_size=row_group_size)
    return path


@pytest.fixture(scope="session")
def encoding():
    from pipeline.tokenization.tiktoken_backend import load_encoding

    return load_encoding("gpt2")


@pytest.fixture(scope="session")
def stories_dataset(tmp_path_factory) -> str:
    """A small prepared story corpus with a validation split, read (never written) by the trainer's
    tests."""
    from pipeline.corpus import write_corpus

    root = tmp_path_factory.mktemp("stories")
    write_corpus(str(root / "stories.txt"), 400, seed=5)
    run_prepare([str(root / "stories.txt")], str(root / "out"), "--validation-fraction", "0.1", "--record-tokens", "512")
    return str(root / "out")
