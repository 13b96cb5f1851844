"""`tokshards export`: each format read back by its own trainer's reader holds exactly the prepared
split's documents and ids, for a GPT-2 dataset (uint16) and one whose ids pass 65,536 with a BOS
before each document (int32 / uint32), long documents (cut across records) whole; reruns give the
same bytes, locally and on `gs://`; a damaged directory, a mixture or a vocabulary a format cannot
hold is refused in one line, and Ctrl-C leaves no file that looks complete."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys

import numpy as np
import pytest

from pipeline.corpus import write_corpus
from pipeline.dataset import storage
from pipeline.dataset.manifest_io import read_manifest
from pipeline.export import split_stream
from schemas import formats
from support import export_readers
from support.damage import run
from support.fault_runs import FAULTS, fault_env, foreground_job
from support.gcs_emulator import gcs_emulator_fixture
from support.runs import read_split, run_prepare, tree_bytes
from support.tokenizer_files import SPECIALS, shifted, train_bpe

sys.path.insert(0, FAULTS)
from interrupt import EXPORT_MOMENTS  # noqa: E402

pytestmark = pytest.mark.integration  # every test runs the command

RECORD_TOKENS = 64
GPT2_EOT = 50256
WIDE_EOT = SPECIALS.index("<|endoftext|>")  # the shifted BPE keeps its specials' ids
WIDE_BOS = SPECIALS.index("<s>")
SPLITS = ("train", "validation")

gcs = gcs_emulator_fixture()


def prepared(root, stories: int, seed: int, *args: str) -> str:
    """Stories prepared into records of 64 tokens (most stories span several), a fifth of them
    validation, in several shards."""
    write_corpus(str(root / "stories.txt"), stories, seed=seed)
    split = ("--validation-fraction", "0.2", "--unit-bytes", "8192")
    records = ("--record-tokens", str(RECORD_TOKENS))
    run_prepare([str(root / "stories.txt")], str(root / "data"), *records, *split, *args)
    return str(root / "data")


@pytest.fixture(scope="module")
def gpt2_data(tmp_path_factory) -> str:
    return prepared(tmp_path_factory.mktemp("gpt2"), 150, 3)


@pytest.fixture(scope="module")
def wide_data(tmp_path_factory) -> str:
    """A byte-level BPE whose regular ids start at 70,000 (uint32), a BOS `<s>` before each
    document and `<|endoftext|>` after it."""
    root = tmp_path_factory.mktemp("wide")
    tokenizer = shifted(train_bpe(str(root / "bpe")), str(root / "tokenizer"), 70_000)
    return prepared(root, 100, 4, "--tokenizer", tokenizer, "--bos-token", "<s>")


def export(data: str, fmt: str, out: str, *args: str):
    return run("export", [data, "--format", fmt, "--output", out, *args])


def prepared_documents(data: str, split: str, eot_id: int) -> list[np.ndarray]:
    return export_readers.split_after(np.concatenate(read_split(data, split)), eot_id)


def read_back(fmt: str, out: str, split: str, eot_id: int, wide: bool) -> list[np.ndarray]:
    """The split's documents as the format's own consumer reads them."""
    if fmt == "megatron":
        documents, dtype = export_readers.megatron(os.path.join(out, split))
        assert dtype == (np.int32 if wide else np.uint16)
        return documents
    if fmt == "datatrove":
        return export_readers.datatrove(os.path.join(out, split), 4 if wide else 2)
    name = "val" if split == "validation" else split
    if fmt == "nanogpt":
        tokens = export_readers.nanogpt(os.path.join(out, f"{name}.bin"))
    else:
        tokens = export_readers.llmc(os.path.join(out, f"{name}.bin"))
        assert tokens.dtype == (np.uint32 if wide else np.uint16)
    return export_readers.split_after(tokens, eot_id)


@pytest.mark.parametrize(
    "fmt,wide",
    [
        ("megatron", False),
        ("megatron", True),
        ("nanogpt", False),
        ("llmc", False),
        ("llmc", True),
        ("datatrove", False),
        ("datatrove", True),
    ],
)
def test_each_format_reads_back_as_the_prepared_documents(
    fmt, wide, gpt2_data, wide_data, tmp_path, monkeypatch
):
    data, eot_id = (wide_data, WIDE_EOT) if wide else (gpt2_data, GPT2_EOT)
    out = str(tmp_path / "out")
    outcome = export(data, fmt, out)
    assert outcome.status == 0, outcome.err

    record = json.loads((tmp_path / "out" / formats.EXPORT_NAME).read_text())
    with open(os.path.join(data, formats.MANIFEST_NAME), "rb") as f:
        assert record["source"]["manifest_sha256"] == hashlib.sha256(f.read()).hexdigest()
    for split in SPLITS:
        expected = prepared_documents(data, split, eot_id)
        assert max(len(d) for d in expected) > RECORD_TOKENS  # documents cut across records
        if wide:
            assert max(int(d.max()) for d in expected) >= 2**16
            assert all(d[0] == WIDE_BOS for d in expected)
        got = read_back(fmt, out, split, eot_id, wide)
        assert len(got) == len(expected) == record["splits"][split]["documents"]
        assert all(np.array_equal(a, b) for a, b in zip(got, expected))

    # A rerun gives the same bytes, even read a record at a time: documents then span reads.
    monkeypatch.setattr(split_stream, "CHUNK_TOKENS", 1)
    again = str(tmp_path / "again")
    assert export(data, fmt, again).status == 0
    assert tree_bytes(again) == tree_bytes(out)


def test_one_split_alone(gpt2_data, tmp_path):
    out = str(tmp_path / "out")
    assert export(gpt2_data, "nanogpt", out, "--split", "validation").status == 0
    assert set(os.listdir(out)) == {"val.bin", formats.EXPORT_NAME}


def test_nanogpt_refuses_ids_beyond_uint16_and_writes_nothing(wide_data, tmp_path):
    out = tmp_path / "out"
    outcome = export(wide_data, "nanogpt", str(out))
    assert outcome.status == 2
    n_vocab = read_manifest(wide_data).tokenizer.n_vocab
    assert "--format nanogpt holds uint16 ids" in outcome.error and str(n_vocab) in outcome.error
    assert not out.exists()


def test_a_mixture_is_refused_in_one_line(gpt2_data, wide_data, tmp_path):
    outcome = export(f"a=1:{gpt2_data},b=1:{wide_data}", "megatron", str(tmp_path / "out"))
    assert outcome.status == 2 and "mixture" in outcome.error


def test_an_output_inside_the_prepared_directory_or_in_the_way_is_one_line(gpt2_data, tmp_path):
    inside = export(gpt2_data, "llmc", os.path.join(gpt2_data, "llmc"))
    assert inside.status == 2 and "--output" in inside.error
    assert not os.path.exists(os.path.join(gpt2_data, "llmc"))
    (tmp_path / "taken").write_text("a file where the output directory would be")
    blocked = export(gpt2_data, "llmc", str(tmp_path / "taken"))
    assert blocked.status == 1 and "cannot write the export" in blocked.error


@pytest.mark.parametrize("damage", ["flipped", "truncated", "stray"])
def test_a_damaged_directory_is_refused_as_verify_refuses_it(damage, gpt2_data, tmp_path):
    data = str(tmp_path / "data")
    shutil.copytree(gpt2_data, data)
    shard = "train/data.array_record-00003-of-00006"
    path = os.path.join(data, shard)
    if damage == "flipped":  # same size: only the hash finds it, once earlier shards are written
        with open(path, "r+b") as f:
            f.seek(100)
            byte = f.read(1)
            f.seek(100)
            f.write(bytes([byte[0] ^ 0xFF]))
    elif damage == "truncated":
        with open(path, "r+b") as f:
            f.truncate(os.path.getsize(path) // 2)
    else:
        shard = "train/data.array_record-00009-of-00010"
        shutil.copyfile(path, os.path.join(data, shard))
    out = tmp_path / "out"

    outcome = export(data, "megatron", str(out))
    verified = run("verify", [data])

    assert outcome.status == 1 and verified.status == 1
    assert shard in outcome.error and f"tokshards verify {data}" in outcome.error
    assert shard in verified.out
    assert not out.exists() or os.listdir(out) == []  # no scratch file left either


def test_ctrl_c_leaves_no_file_that_looks_complete_and_the_rerun_gives_the_same_bytes(
    gpt2_data, tmp_path
):
    reference = str(tmp_path / "reference")
    assert export(gpt2_data, "megatron", reference).status == 0
    out = str(tmp_path / "out")
    assert export(gpt2_data, "megatron", out).status == 0  # an earlier export, then a rerun
    os.makedirs(tmp_path / "state")
    env = fault_env(INTERRUPT_AT="exporting", INTERRUPT_STATE_DIR=str(tmp_path / "state"))
    assert "exporting" in EXPORT_MOMENTS

    result = foreground_job(
        ["-m", "pipeline", "export", gpt2_data, "--format", "megatron", "--output", out], env
    )

    assert (tmp_path / "state" / "sent").exists(), result.stderr
    assert result.returncode == 130, result.stderr
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1] == "export: interrupted"
    assert not os.path.exists(os.path.join(out, formats.EXPORT_NAME))
    assert not [n for n in os.listdir(out) if n.startswith(".")]
    assert export(gpt2_data, "megatron", out).status == 0
    assert tree_bytes(out) == tree_bytes(reference)


def test_gcs_to_gcs_writes_the_bytes_of_a_local_export(gcs, gpt2_data, tmp_path):
    gcs.reset()
    for relative, content in tree_bytes(gpt2_data).items():
        storage.write_bytes_atomic(gcs.url("data", relative), content)
    local = str(tmp_path / "local")
    assert export(gpt2_data, "datatrove", local).status == 0

    outcome = export(gcs.url("data"), "datatrove", gcs.url("export"))

    assert outcome.status == 0, outcome.err
    expected = tree_bytes(local)
    for relative, content in expected.items():
        remote = storage.read_bytes(gcs.url("export", relative))
        if relative == formats.EXPORT_NAME:  # names its source, here the bucket's copy
            assert (
                json.loads(remote)["source"]["manifest_sha256"]
                == (json.loads(content)["source"]["manifest_sha256"])
            )
        else:
            assert remote == content, relative
