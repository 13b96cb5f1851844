"""Conservation on every supported format: tokens written and documents decoded back."""

from __future__ import annotations

import collections
import os

import datasets
import pytest

from pipeline.prepare.planning import make_plan
from schemas.prepare_config import PrepareConfig
from support.corpora import sample_documents, write_jsonl, write_parquet, write_text
from support.runs import decoded_documents, read_split, run_prepare

DOCS = sample_documents(300)


def _expected_tokens(encoding, docs):
    return sum(len(encoding.encode_ordinary(d)) + 1 for d in docs)


@pytest.mark.integration
@pytest.mark.parametrize(
    "name,writer",
    [
        ("corpus.txt", write_text),
        ("corpus.jsonl", write_jsonl),
        ("corpus.jsonl.gz", write_jsonl),
        ("corpus.jsonl.zst", write_jsonl),
        ("corpus.parquet", write_parquet),
    ],
)
def test_conservation_per_format(tmp_path, encoding, name, writer):
    path = writer(str(tmp_path / name), DOCS)
    manifest = run_prepare(
        [path], str(tmp_path / "out"), "--unit-bytes", "4096", "--record-tokens", "256"
    )
    assert manifest.totals["train"].tokens == _expected_tokens(encoding, DOCS)
    assert manifest.totals["train"].documents == len(DOCS)
    assert collections.Counter(
        decoded_documents(str(tmp_path / "out"), encoding)
    ) == collections.Counter(DOCS)
    if not name.endswith((".gz", ".zst")):
        assert manifest.num_units > 1, "small units should cut this input into several"


@pytest.mark.integration
def test_conservation_huggingface_saved_and_data_files(tmp_path, encoding):
    saved = str(tmp_path / "saved")
    datasets.Dataset.from_dict({"text": DOCS}).save_to_disk(saved)
    manifest = run_prepare([saved], str(tmp_path / "out1"), "--unit-bytes", "4096")
    assert manifest.inputs[0].format == "arrow"
    assert manifest.num_units > 1
    assert collections.Counter(
        decoded_documents(str(tmp_path / "out1"), encoding)
    ) == collections.Counter(DOCS)

    # Data files loaded through `datasets.load_dataset`, as a hub id would be.
    data_dir = tmp_path / "hub_like"
    data_dir.mkdir()
    write_jsonl(str(data_dir / "part-0.jsonl"), DOCS)
    manifest = run_prepare([str(data_dir)], str(tmp_path / "out2"), "--format", "hf")
    assert manifest.totals["train"].tokens == _expected_tokens(encoding, DOCS)


@pytest.mark.integration
def test_special_token_text_is_ordinary_text(tmp_path, encoding):
    docs = ["before <|endoftext|> after", "<|endoftext|><|endoftext|>"]
    path = write_jsonl(str(tmp_path / "s.jsonl"), docs)
    out = str(tmp_path / "out")
    manifest = run_prepare([path], out)
    assert manifest.totals["train"].tokens == _expected_tokens(encoding, docs)
    assert sorted(decoded_documents(out, encoding)) == sorted(docs)
    # Only the appended end-of-text ids are the special token.
    tokens = [t for r in read_split(out) for t in r.tolist()]
    assert tokens.count(encoding.eot_token) == len(docs)


@pytest.mark.integration
def test_several_inputs_and_globs_mix_formats(tmp_path, encoding):
    a = write_text(str(tmp_path / "a.txt"), DOCS[:100])
    write_text(str(tmp_path / "b.txt"), DOCS[100:200])
    c = write_parquet(str(tmp_path / "c.parquet"), DOCS[200:])
    manifest = run_prepare([str(tmp_path / "*.txt"), c], str(tmp_path / "out"))
    assert [os.path.basename(i.path) for i in manifest.inputs] == ["a.txt", "b.txt", "c.parquet"]
    assert manifest.inputs[0].path == a
    assert collections.Counter(
        decoded_documents(str(tmp_path / "out"), encoding)
    ) == collections.Counter(DOCS)


@pytest.mark.integration
def test_validation_split_is_stable_and_complete(tmp_path, encoding):
    path = write_jsonl(str(tmp_path / "c.jsonl"), DOCS)
    out = str(tmp_path / "out")
    manifest = run_prepare([path], out, "--validation-fraction", "0.2", "--unit-bytes", "4096")
    train = decoded_documents(out, encoding, "train")
    validation = decoded_documents(out, encoding, "validation")
    assert collections.Counter(train + validation) == collections.Counter(DOCS)
    assert 0.1 < len(validation) / len(DOCS) < 0.3
    assert manifest.totals["validation"].documents == len(validation)
    # The split depends on the document's content: a corpus in another order splits the same.
    path2 = write_jsonl(str(tmp_path / "r.jsonl"), DOCS[::-1])
    run_prepare([path2], str(tmp_path / "out2"), "--validation-fraction", "0.2")
    assert collections.Counter(
        decoded_documents(str(tmp_path / "out2"), encoding, "validation")
    ) == collections.Counter(validation)


@pytest.mark.integration
def test_units_are_numbered_consecutively_across_inputs(tmp_path):
    a = write_text(str(tmp_path / "a.txt"), DOCS)
    b = write_jsonl(str(tmp_path / "b.jsonl"), DOCS)
    manifest = run_prepare([a, b], str(tmp_path / "out"), "--unit-bytes", "4096")
    units = sorted({s.unit for s in manifest.shards})
    assert units == list(range(manifest.num_units))
    for shard in manifest.shards:
        assert shard.path == f"train/data.array_record-{shard.unit:05d}-of-{manifest.num_units:05d}"


def test_plan_numbers_inputs_and_units_in_input_order(tmp_path):
    first, second = (write_text(str(tmp_path / f"{name}.txt"), DOCS) for name in ("a", "c"))
    bad = tmp_path / "b.parquet"
    bad.write_bytes(b"not parquet at all")
    plan = make_plan([first, str(bad), second], PrepareConfig(unit_bytes=4096, skip_bad_files=True))
    assert [i.path for i in plan.inputs] == [first, second]
    assert [r.path for r in plan.bad_inputs] == [str(bad)]
    assert [u.index for u in plan.units] == list(range(len(plan.units)))
    assert all(plan.inputs[u.input_index].path == u.path for u in plan.units)
    assert [u.input_index for u in plan.units] == sorted(u.input_index for u in plan.units)
