"""Bad input: a clear error or a counted, recorded skip; never a crash or a silent loss."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from pipeline.prepare.launcher import PrepareError
from schemas import formats
from support.corpora import write_jsonl, write_parquet, write_text
from support.runs import decoded_documents, read_split, run_prepare

pytestmark = pytest.mark.integration  # every test here runs a command, a process or training


def _rejects(out: str) -> list[dict]:
    with open(os.path.join(out, formats.REJECTS_NAME)) as f:
        return [json.loads(line) for line in f]


def test_invalid_utf8_is_replaced_and_counted(tmp_path, encoding):
    path = tmp_path / "c.txt"
    path.write_bytes(
        b"good one\n<|endoftext|>\nbad \xff\xfe bytes\n<|endoftext|>\n"
        b"also \xc3 bad\n<|endoftext|>\n"
    )
    out = str(tmp_path / "out")
    manifest = run_prepare([str(path)], out)
    assert manifest.counts["invalid_utf8_documents"] == 2
    assert sorted(decoded_documents(out, encoding)) == sorted(
        ["good one", "bad \ufffd\ufffd bytes", "also \ufffd bad"]
    )


def test_empty_and_blank_documents_are_skipped_and_counted(tmp_path, encoding):
    path = write_text(str(tmp_path / "c.txt"), ["one", "", "   \n\t ", "two"])
    jsonl = write_jsonl(str(tmp_path / "c.jsonl"), ["three", "", "  "])
    out = str(tmp_path / "out")
    manifest = run_prepare([path, jsonl], out)
    assert manifest.skipped["empty_document"] == 4
    assert sorted(decoded_documents(out, encoding)) == ["one", "three", "two"]


def test_malformed_json_lines_are_rejected_with_file_and_line(tmp_path, encoding):
    good = [json.dumps({"text": f"document number {i} " + "word " * 40}) for i in range(200)]
    lines = list(good)
    lines[10] = '{"text": "unterminated'
    lines[120] = json.dumps({"body": "no text field"})
    lines[150] = json.dumps({"text": 42})
    lines[170] = json.dumps(["not", "an", "object"])
    lines[180] = json.dumps({"text": None})
    path = tmp_path / "c.jsonl"
    path.write_text("\n".join(lines) + "\n")
    out = str(tmp_path / "out")
    manifest = run_prepare([str(path)], out, "--unit-bytes", "4096")
    assert manifest.num_units > 3, "line numbers must hold across unit boundaries"
    assert manifest.skipped == {
        "malformed_json": 1,
        "missing_text_field": 3,
        "non_string_text_field": 1,
    }
    rejects = _rejects(out)
    assert [(r["reason"], r["location"]) for r in rejects] == [
        ("malformed_json", "line 11"),
        ("missing_text_field", "line 121"),
        ("non_string_text_field", "line 151"),
        ("missing_text_field", "line 171"),
        ("missing_text_field", "line 181"),
    ]
    assert all(r["path"] == str(path) for r in rejects)
    assert manifest.totals["train"].documents == 195


@pytest.mark.parametrize("suffix", ["gz", "zst"])
def test_truncated_compressed_file_stops_the_run_naming_it(tmp_path, suffix):
    docs = [f"doc {i} " + "text " * 50 for i in range(2000)]
    full = write_jsonl(str(tmp_path / f"full.jsonl.{suffix}"), docs)
    data = open(full, "rb").read()
    truncated = tmp_path / f"cut.jsonl.{suffix}"
    truncated.write_bytes(data[: len(data) // 2])
    out = str(tmp_path / "out")
    with pytest.raises(PrepareError, match=f"cut.jsonl.{suffix}.*truncated"):
        run_prepare([full, str(truncated)], out)
    assert not os.path.exists(os.path.join(out, formats.MANIFEST_NAME))

    manifest = run_prepare([full, str(truncated)], str(tmp_path / "skip"), "--skip-bad-files")
    assert manifest.skipped == {"unreadable_file": 1}
    assert manifest.totals["train"].documents == len(docs)
    (reject,) = _rejects(str(tmp_path / "skip"))
    assert reject["path"] == str(truncated) and "truncated" in reject["detail"]


def test_unreadable_parquet_is_an_error_or_a_recorded_skip(tmp_path, encoding):
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(b"PAR1 this is not parquet at all")
    good = write_text(str(tmp_path / "good.txt"), ["fine"])
    with pytest.raises(PrepareError, match="bad.parquet"):
        run_prepare([str(bad), good], str(tmp_path / "out"))
    manifest = run_prepare([str(bad), good], str(tmp_path / "skip"), "--skip-bad-files")
    assert manifest.skipped == {"unreadable_file": 1}
    assert decoded_documents(str(tmp_path / "skip"), encoding) == ["fine"]


def test_garbage_nul_crlf_and_bom_are_handled(tmp_path, encoding):
    rng = np.random.default_rng(0)
    garbage = rng.integers(0, 256, 20000, dtype=np.uint8).tobytes().replace(b"<|endoftext|>", b"")
    crlf = (
        b"\xef\xbb\xbffirst line\r\nsecond\x00line\r\n<|endoftext|>\r\n"
        b"  third doc \r\n<|endoftext|>\r\n"
    )
    (tmp_path / "crlf.txt").write_bytes(crlf)
    (tmp_path / "garbage.txt").write_bytes(garbage)
    out = str(tmp_path / "out")
    # Random bytes are no text: each unit of them is refused, or skipped and recorded.
    with pytest.raises(PrepareError, match="garbage.txt .* looks binary"):
        run_prepare(
            [str(tmp_path / "crlf.txt"), str(tmp_path / "garbage.txt")], out, "--unit-bytes", "4096"
        )
    manifest = run_prepare(
        [str(tmp_path / "crlf.txt"), str(tmp_path / "garbage.txt")],
        out,
        "--unit-bytes",
        "4096",
        "--skip-bad-files",
        "--overwrite",
    )
    docs = decoded_documents(out, encoding)
    assert sorted(docs) == ["first line\r\nsecond\x00line", "third doc"]
    assert manifest.skipped == {"binary_file": 5}
    total = sum(len(encoding.encode_ordinary(d)) + 1 for d in docs)
    assert manifest.totals["train"].tokens == total


def test_bom_at_start_of_jsonl(tmp_path, encoding):
    path = tmp_path / "b.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps({"text": "hello"}).encode() + b"\n")
    out = str(tmp_path / "out")
    run_prepare([str(path)], out)
    assert decoded_documents(out, encoding) == ["hello"]


def test_a_long_document_is_cut_into_records_of_record_tokens(tmp_path, encoding):
    long_doc = " ".join(f"w{i}" for i in range(5000))
    path = write_jsonl(str(tmp_path / "l.jsonl"), ["short"] * 40 + [long_doc])
    out = str(tmp_path / "out")
    manifest = run_prepare([str(path)], out, "--record-tokens", "64")
    records = [r.tolist() for r in read_split(out)]
    assert all(len(r) <= 64 for r in records)
    # The long document's records, in order, one after another: full ones, then its last part
    # alone, which alone of them ends with the end-of-text id.
    long_ids = encoding.encode_ordinary(long_doc) + [encoding.eot_token]
    first = records.index(long_ids[:64])
    parts = records[first : first + -(-len(long_ids) // 64)]
    assert sum(parts, []) == long_ids
    assert [r[-1] == encoding.eot_token for r in parts] == [False] * (len(parts) - 1) + [True]
    assert all(r[-1] == encoding.eot_token for r in records[:first] + records[first + len(parts) :])
    assert sorted(decoded_documents(out, encoding)) == sorted(["short"] * 40 + [long_doc])
    assert manifest.totals["train"].records == len(records) > len(parts) > 2


@pytest.mark.slow
def test_fifty_megabyte_single_document(tmp_path, encoding):
    text = ("All work and no play makes a dull model. " * 1_250_000).strip()
    assert len(text) >= 50_000_000
    path = write_jsonl(str(tmp_path / "big.jsonl"), [text])
    out = str(tmp_path / "out")
    manifest = run_prepare([path], out)
    assert manifest.totals["train"].documents == 1
    assert manifest.totals["train"].tokens == len(encoding.encode_ordinary(text)) + 1
    tokens = np.concatenate(read_split(out))
    assert encoding.decode(tokens[:-1].tolist()) == text


def test_a_separator_with_leading_whitespace_split_by_a_unit_boundary_loses_nothing(
    tmp_path, encoding
):
    # The first document ends so that a unit boundary falls inside the separator line after it,
    # past its leading whitespace.
    docs = ["x" * 4092] + [f"document {i}" + " word" * (i % 9) for i in range(100)]
    path = write_text(str(tmp_path / "c.txt"), docs, separator="  ----")
    assert open(path, "rb").read()[4093:4099] == b"  ----"
    out = str(tmp_path / "out")
    manifest = run_prepare([path], out, "--separator", "  ----", "--unit-bytes", "4096")
    assert manifest.totals["train"].documents == 101 and not manifest.skipped
    assert sorted(decoded_documents(out, encoding)) == sorted(docs)


def _corrupt_page_parquet(path: str) -> str:
    """A Parquet file whose second row group's first page header is garbage (its footer is fine)."""
    import pyarrow.parquet as pq

    write_parquet(path, [f"document {i} " * 20 for i in range(2000)], row_group_size=500)
    data = bytearray(open(path, "rb").read())
    chunk = pq.ParquetFile(path).metadata.row_group(1).column(0)
    offset = chunk.dictionary_page_offset or chunk.data_page_offset
    data[offset : offset + 16] = bytes(b ^ 0xFF for b in data[offset : offset + 16])
    open(path, "wb").write(bytes(data))
    return path


def _truncated_arrow(path: str) -> str:
    """An Arrow IPC stream (what `datasets` writes) cut off inside its third record batch."""
    import pyarrow as pa

    schema = pa.schema([("text", pa.string())])
    with pa.OSFile(path, "wb") as sink, pa.ipc.new_stream(sink, schema) as writer:
        for b in range(4):
            writer.write_batch(
                pa.record_batch(
                    [pa.array([f"batch {b} row {i} " * 10 for i in range(500)])], schema=schema
                )
            )
    data = open(path, "rb").read()
    open(path, "wb").write(data[: len(data) // 2 + 7])
    return path


@pytest.mark.parametrize("bad", ["corrupt_page.parquet", "truncated.arrow"])
def test_a_columnar_file_that_fails_inside_pyarrow_is_an_error_or_a_recorded_skip(
    tmp_path, encoding, bad
):
    path = str(tmp_path / bad)
    (_corrupt_page_parquet if bad.endswith(".parquet") else _truncated_arrow)(path)
    good = write_text(str(tmp_path / "good.txt"), ["fine"])
    with pytest.raises(PrepareError, match=bad):
        run_prepare([path, good], str(tmp_path / "out"))
    manifest = run_prepare([path, good], str(tmp_path / "skip"), "--skip-bad-files")
    assert manifest.skipped["unreadable_file"] >= 1
    assert all(
        r["reason"] == "unreadable_file" and r["path"] == path
        for r in _rejects(str(tmp_path / "skip"))
    )
    assert "fine" in decoded_documents(str(tmp_path / "skip"), encoding)


@pytest.mark.parametrize(
    "name, data",
    [
        ("random.txt", np.random.default_rng(0).integers(0, 256, 65536, dtype=np.uint8).tobytes()),
        ("utf16.txt", ("Once upon a time, a fox.\n<|endoftext|>\n" * 400).encode("utf-16")),
        ("records.jsonl", b"\x7fELF\x02\x01\x01" + bytes(8000) + b"\n" * 3),
        (
            "packed.jsonl.gz",
            __import__("gzip").compress(
                np.random.default_rng(1).integers(0, 256, 20000, dtype=np.uint8).tobytes()
            ),
        ),
    ],
)
def test_a_binary_input_is_refused_or_skipped_and_recorded(tmp_path, name, data):
    binary = tmp_path / name
    binary.write_bytes(data)
    good = write_text(str(tmp_path / "good.txt"), ["a story about a fox"])
    with pytest.raises(PrepareError, match=f"{name}.* looks binary, not UTF-8 text"):
        run_prepare([good, str(binary)], str(tmp_path / "out"))
    out = str(tmp_path / "skipped")
    manifest = run_prepare([good, str(binary)], out, "--skip-bad-files")
    assert manifest.skipped == {"binary_file": 1} and manifest.totals["train"].documents == 1
    assert [(r["reason"], r["path"]) for r in _rejects(out)] == [("binary_file", str(binary))]


def test_text_with_a_few_nul_or_latin_1_bytes_is_text(tmp_path, encoding):
    path = tmp_path / "c.txt"
    path.write_bytes(
        ("Caf\xe9 cr\xe8me, a story.\x00 " * 40).encode("latin-1") + b"\n<|endoftext|>\n"
    )
    manifest = run_prepare([str(path)], str(tmp_path / "out"))
    assert (
        manifest.totals["train"].documents == 1 and manifest.counts["invalid_utf8_documents"] == 1
    )


def test_a_run_with_no_training_data_fails_naming_why(tmp_path):
    body = write_jsonl(
        str(tmp_path / "body.jsonl"), [f"story {i}" for i in range(146)], field="body"
    )
    with pytest.raises(
        PrepareError,
        match=r"no training data: every document was skipped \(146 missing_text_field: "
        r"check --text-field; see rejects.jsonl\)",
    ):
        run_prepare([body], str(tmp_path / "a"))
    (tmp_path / "empty.jsonl").write_bytes(b"")
    with pytest.raises(PrepareError, match="no training data: the 1 inputs are empty"):
        run_prepare([str(tmp_path / "empty.jsonl")], str(tmp_path / "b"))
    same = write_text(str(tmp_path / "same.txt"), ["one story", "one story"])
    passage = " ".join(f"w{i}" for i in range(20))
    leaked = write_text(str(tmp_path / "leaked.txt"), [passage])
    with pytest.raises(
        PrepareError, match=r"removed by cleaning \(1 contaminated; see removals.jsonl\)"
    ):
        run_prepare(
            [leaked],
            str(tmp_path / "c"),
            "--decontaminate",
            write_jsonl(str(tmp_path / "e.jsonl"), [passage]),
        )
    with pytest.raises(PrepareError, match="all 2 documents went to the validation split"):
        run_prepare([same], str(tmp_path / "d"), "--validation-fraction", "0.9999")
    assert not os.path.exists(tmp_path / "a" / formats.MANIFEST_NAME)
    assert os.path.exists(tmp_path / "a" / formats.REJECTS_NAME)
