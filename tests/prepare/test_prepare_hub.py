"""`prepare --format hf` on a hub id, end to end against the loopback stand-in of the Hub.

The launcher resolves the id once to a commit and its files; workers (separate processes) read only
their row ranges of those files at that commit, through the `hf://` Beam filesystem.
"""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys

import pytest

from schemas import formats
from support.corpora import sample_documents, write_parquet
from support.runs import REPO, decoded_documents, run_prepare

pytestmark = pytest.mark.integration  # every test here runs a command, a process or training

DOCS = sample_documents(400, seed=7)


def _repo(root, docs: list[str]) -> str:
    (root / "data").mkdir(parents=True)
    write_parquet(
        str(root / "data" / "train-00000-of-00002.parquet"), docs[:250], row_group_size=40
    )
    write_parquet(
        str(root / "data" / "train-00001-of-00002.parquet"), docs[250:], row_group_size=40
    )
    write_parquet(str(root / "data" / "validation-00000-of-00001.parquet"), ["held out"] * 5)
    return str(root)


def test_a_hub_dataset_is_read_pinned_by_worker_processes(hub, tmp_path, encoding):
    sha = hub.commit("org/stories", _repo(tmp_path / "v1", DOCS))
    out = str(tmp_path / "out")
    args = ["--format", "hf", "--input", "org/stories", "--output", out, "--unit-bytes", "4096"]
    result = subprocess.run(
        [sys.executable, "-m", "pipeline", "prepare", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    manifest = json.loads(open(os.path.join(out, formats.MANIFEST_NAME)).read())
    assert manifest["hub_revisions"] == {"org/stories": sha}
    assert [i["path"] for i in manifest["inputs"]] == [
        f"hf://datasets/org/stories@{sha}/data/train-0000{i}-of-00002.parquet" for i in range(2)
    ]
    assert manifest["num_units"] > 2, "row ranges: several units per file"
    assert collections.Counter(decoded_documents(out, encoding)) == collections.Counter(DOCS)
    # No worker fetched a data file whole: every read of one was a ranged read.
    data_reads = [r for r in hub.requests if r.method == "GET" and r.path.endswith(".parquet")]
    assert data_reads and all(r.range for r in data_reads)


@pytest.mark.slow
def test_a_rerun_reads_the_commit_the_run_pinned(hub, tmp_path, encoding):
    first = hub.commit("org/stories", _repo(tmp_path / "v1", DOCS))
    out = str(tmp_path / "out")
    args = ["--unit-bytes", "4096", "--format", "hf", "--hf-split", "train"]
    run_prepare(["org/stories"], out, *args)
    second = hub.commit("org/stories", _repo(tmp_path / "v2", DOCS[:100]))
    assert second != first
    # The output is complete for the commit it was made from: nothing to redo, nothing mixed in.
    manifest = run_prepare(["org/stories"], out, *args)
    assert manifest.hub_revisions == {"org/stories": first}
    # Asked for the branch anew, with --overwrite, the run takes the new commit.
    manifest = run_prepare(["org/stories"], out, *args, "--hf-revision", "main", "--overwrite")
    assert manifest.hub_revisions == {"org/stories": second}
    assert collections.Counter(decoded_documents(out, encoding)) == collections.Counter(DOCS[:100])
