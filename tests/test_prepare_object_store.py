"""`prepare`, `verify` and `inspect` on an object store: no directories, only keys and prefixes.

The store is in memory with GCS's semantics (see object_store.py), so these tests exercise every
path that a `gs://` run takes apart from the network itself.
"""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from object_store import OBJECTS
from pipeline import verify
from pipeline.manifest_io import read_records
from pipeline.prepare.launcher import PrepareError

from conftest import read_split, run_prepare, sample_documents, write_text

DOCS = sample_documents(300)
ARGS = ("--unit-bytes", "4096", "--validation-fraction", "0.1")


@pytest.fixture
def bucket(tmp_path):
    """A bucket holding the corpus at raw/corpus.txt; the local copy is beside it for comparison."""
    OBJECTS.clear()
    local = write_text(str(tmp_path / "corpus.txt"), DOCS)
    with open(local, "rb") as f:
        OBJECTS["memstore://bucket/raw/corpus.txt"] = f.read()
    yield "memstore://bucket"
    OBJECTS.clear()


def _names_under(prefix: str) -> set[str]:
    return {k.removeprefix(prefix + "/") for k in OBJECTS if k.startswith(prefix + "/")}


def test_prepare_on_an_object_store_writes_what_a_local_run_writes(tmp_path, bucket):
    local = run_prepare([str(tmp_path / "corpus.txt")], str(tmp_path / "out"), *ARGS)
    out = f"{bucket}/out"
    remote = run_prepare([f"{bucket}/raw/corpus.txt"], out, *ARGS)

    assert [(s.path, s.bytes, s.sha256) for s in remote.shards] == [(s.path, s.bytes, s.sha256) for s in local.shards]
    assert remote.totals == local.totals and len(remote.shards) > 2
    for shard in remote.shards:
        assert hashlib.sha256(OBJECTS[f"{out}/{shard.path}"]).hexdigest() == shard.sha256
    # The run's state (plan, unit records) is gone and no temporary object is left behind.
    assert _names_under(out) == {"manifest.json", "rejects.jsonl", "run_info.json", *(s.path for s in remote.shards)}
    assert verify.problems(out, remote) == []
    for split in ("train", "validation"):
        assert np.array_equal(np.concatenate(read_records(out, remote, split)), np.concatenate(read_split(str(tmp_path / "out"), split)))


def test_an_object_store_output_is_guarded_and_overwritten_like_a_directory(bucket):
    source, out = f"{bucket}/raw/corpus.txt", f"{bucket}/out"
    first = run_prepare([source], out, "--unit-bytes", "4096")
    with pytest.raises(PrepareError, match="different config"):
        run_prepare([source], out, "--unit-bytes", "8192")
    second = run_prepare([source], out, "--unit-bytes", "8192", "--overwrite")
    assert {s.path for s in first.shards}.isdisjoint(s.path for s in second.shards)
    assert _names_under(out) == {"manifest.json", "rejects.jsonl", "run_info.json", *(s.path for s in second.shards)}

    OBJECTS[f"{bucket}/other/notes.txt"] = b"someone else's"
    with pytest.raises(PrepareError, match="not empty"):
        run_prepare([source], f"{bucket}/other")


def test_verify_names_a_damaged_object(bucket):
    out = f"{bucket}/out"
    manifest = run_prepare([f"{bucket}/raw/corpus.txt"], out, "--unit-bytes", "4096")
    damaged, missing = manifest.shards[0].path, manifest.shards[1].path
    data = bytearray(OBJECTS[f"{out}/{damaged}"])
    data[len(data) // 2] ^= 0xFF
    OBJECTS[f"{out}/{damaged}"] = bytes(data)
    del OBJECTS[f"{out}/{missing}"]
    assert verify.problems(out, manifest) == [f"wrong sha256: {damaged}", f"missing: {missing}"]
