"""A run whose filters split words starts its local job's process with the command, so that spaCy
loads beside the launcher's own start (`early_job`): the job runs there and writes what a job
started after planning writes, and that process never outlives its launcher."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import psutil
import pytest

from schemas import formats
from support.corpora import write_jsonl
from support.runs import REPO, cli, run_outputs, run_prepare
from support.web_text import held_out_documents

FILTERS = ["--filter", "gopher-quality,c4", "--unit-bytes", "65536"]


def _started_with_command(output: str) -> bool:
    with open(os.path.join(output, formats.RUN_INFO_NAME)) as f:
        return json.load(f)["job_started_with_command"]


@pytest.mark.slow
def test_a_run_whose_filters_split_words_runs_its_job_in_the_process_started_with_it(tmp_path):
    path = write_jsonl(str(tmp_path / "web.jsonl"), held_out_documents(seed=2, count=600))
    early = str(tmp_path / "early")
    result = cli("--input", path, "--output", early, *FILTERS)
    assert result.returncode == 0, result.stderr
    assert _started_with_command(early)
    # Called as a library, the run starts its job after planning, as it always did.
    planned = str(tmp_path / "planned")
    run_prepare([path], planned, *FILTERS, "--direct_running_mode=multi_processing")
    assert not _started_with_command(planned)
    assert run_outputs(early) == run_outputs(planned)
    # Filters that split no words load in milliseconds: nothing to start early.
    plain = str(tmp_path / "plain")
    assert cli("--input", path, "--output", plain, "--filter", "pii").returncode == 0
    assert not _started_with_command(plain)


def _gone(process: psutil.Process) -> bool:
    try:
        return not process.is_running() or process.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@pytest.mark.slow
def test_the_process_started_with_the_command_dies_with_its_launcher(tmp_path):
    path = write_jsonl(str(tmp_path / "web.jsonl"), held_out_documents(seed=3, count=300))
    command = [sys.executable, "-m", "pipeline", "prepare", "--input", path]
    command += ["--output", str(tmp_path / "out"), *FILTERS]
    launcher = subprocess.Popen(command, cwd=REPO, stderr=subprocess.DEVNULL)
    try:
        parent = psutil.Process(launcher.pid)
        deadline = time.monotonic() + 60
        while not (children := parent.children()) and time.monotonic() < deadline:
            time.sleep(0.005)
        assert children, "the launcher started no process"
    finally:
        launcher.kill()
        launcher.wait()
    deadline = time.monotonic() + 30
    while not all(_gone(child) for child in children) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert all(_gone(child) for child in children)
