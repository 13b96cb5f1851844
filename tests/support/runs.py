"""Running the project's commands in tests: `prepare` in this process or as the console script
does, and reading back what a run wrote."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import numpy as np

from pipeline.cli import commands
from pipeline.dataset.manifest_io import read_manifest, read_records
from pipeline.prepare import launcher
from schemas import formats
from schemas.manifest import Manifest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# One worker in-process: fast to start. Determinism tests compare it with multi-process runs.
IN_PROCESS = ["--direct_num_workers=1", "--direct_running_mode=in_memory"]


def run_prepare(inputs: list[str], output: str, *extra: str) -> Manifest:
    argv = [a for path in inputs for a in ("--input", path)] + ["--output", output, *extra]
    if not any(a.startswith("--direct_") for a in extra):
        argv += IN_PROCESS
    return launcher.run(argv)


def run_command(name: str, *argv: str) -> int:
    """A `tokshards` command run in this process as the console script runs it: its exit status, and
    its error line on stderr. The interrupt and SIGTERM handling it installs is undone after it."""
    handlers, hook = (
        {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)},
        sys.unraisablehook,
    )
    try:
        return commands.run_command(name, list(argv), f"tokshards {name}")
    finally:
        for number, handler in handlers.items():
            signal.signal(number, handler)
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
    assert len(ends) and ends[-1] == len(tokens) - 1, (
        "every split must end with an end-of-text token"
    )
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


def run_outputs(root: str) -> dict[str, bytes]:
    """`tree_bytes` but run_info.json, which alone may differ between equal runs."""
    files = tree_bytes(root)
    files.pop(formats.RUN_INFO_NAME)
    return files


def files_in_place(directory: str) -> int:
    """Files written whole in `directory`, not the dot-named temporaries of ones being written."""
    return (
        len([n for n in os.listdir(directory) if not n.startswith(".")])
        if os.path.isdir(directory)
        else 0
    )


# The flags of the smallest model that trains end to end in a test.
TINY_MODEL = ("--preset", "tiny", "--width", "32", "--layers", "1", "--heads", "2")


def cli(*args: str, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pipeline", "prepare", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )


def one_line_error(result: subprocess.CompletedProcess, status: int = 1) -> str:
    """The run failed with `status` (1: a failed run, 2: a usage error) and said why in one line,
    without a traceback or Beam's noise."""
    assert result.returncode == status, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    errors = [line for line in result.stderr.splitlines() if "error" in line.lower()]
    assert len(errors) == 1 and errors[0].startswith("prepare: error: "), result.stderr
    return errors[0]
