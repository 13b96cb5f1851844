"""Eval files for `--decontaminate` are read by the input readers (pipeline/prepare/read/): JSON
Lines split at "\\n" alone, as inputs are, whatever line breaks a JSON string holds; compressed
files decompressed and checked as inputs are; a byte-order mark dropped; a bad line or file named in
one line, as an input's would be."""

from __future__ import annotations

import gzip
import json
import os

import pytest

from pipeline.prepare.stages import PrepareError
from schemas import formats
from support.corpora import write_jsonl
from support.runs import run_prepare

# Each test runs prepare.
pytestmark = pytest.mark.integration

QUESTION = (
    "which planet in the solar system has the longest day of all the planets that orbit the sun"
)
OTHER = "the quick brown fox jumps over the lazy dog while the farmer sleeps under the old oak tree"


def _corpus(tmp_path) -> str:
    return write_jsonl(
        str(tmp_path / "corpus.jsonl"),
        [f"A quiz: {QUESTION}? Venus.", "Nothing to see here at all."],
    )


def _refusal(tmp_path, eval_path: str) -> str:
    with pytest.raises(PrepareError) as raised:
        run_prepare([_corpus(tmp_path)], str(tmp_path / "out"), "--decontaminate", eval_path)
    message = str(raised.value)
    assert "\n" not in message and eval_path in message
    return message


@pytest.mark.parametrize("separator", ["\u2028", "\u2029", "\x85"])
def test_a_line_break_inside_a_json_string_is_text_not_a_line_end(tmp_path, separator):
    record = {"question": QUESTION.replace(" has ", f" has{separator}"), "choices": [OTHER]}
    eval_path = tmp_path / "eval.jsonl"
    eval_path.write_text(
        json.dumps(record, ensure_ascii=False) + "\n", encoding="utf-8"
    )  # valid JSON, raw
    assert separator in eval_path.read_text(encoding="utf-8")

    manifest = run_prepare(
        [_corpus(tmp_path)], str(tmp_path / "out"), "--decontaminate", str(eval_path)
    )
    assert manifest.removed == {"contaminated": 1}
    assert manifest.eval_files[0].examples == 2


def test_a_bad_line_is_numbered_as_an_input_line_is(tmp_path):
    lines = [
        json.dumps({"q": f"{QUESTION}\u2028{OTHER}"}, ensure_ascii=False),
        json.dumps({"q": f"{OTHER}\x85{QUESTION}"}, ensure_ascii=False),
        '{"q": "cut short',
    ]
    eval_path = tmp_path / "eval.jsonl"
    eval_path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert "line 3 is not JSON" in _refusal(tmp_path, str(eval_path))


def test_a_byte_order_mark_starts_an_eval_file_as_it_starts_an_input(tmp_path):
    eval_path = tmp_path / "eval.jsonl"
    eval_path.write_bytes(b"\xef\xbb\xbf" + json.dumps({"q": QUESTION}).encode() + b"\n")
    manifest = run_prepare(
        [_corpus(tmp_path)], str(tmp_path / "out"), "--decontaminate", str(eval_path)
    )
    assert manifest.removed == {"contaminated": 1}


def test_a_truncated_compressed_eval_file_is_one_line_naming_it(tmp_path):
    whole = gzip.compress((json.dumps({"q": QUESTION}) + "\n").encode() * 50, mtime=0)
    eval_path = tmp_path / "eval.jsonl.gz"
    eval_path.write_bytes(whole[: len(whole) // 2])
    assert "truncated gz stream" in _refusal(tmp_path, str(eval_path))


def test_a_file_that_is_not_parquet_is_one_line_naming_it(tmp_path):
    eval_path = tmp_path / "eval.parquet"
    eval_path.write_bytes(b"PAR1 but not really a parquet file")
    assert "not a readable Parquet file" in _refusal(tmp_path, str(eval_path))


def test_removals_name_the_eval_file(tmp_path):
    eval_path = tmp_path / "eval.txt.gz"
    eval_path.write_bytes(gzip.compress(f"{QUESTION}\n<|endoftext|>\n{OTHER}\n".encode(), mtime=0))
    out = str(tmp_path / "out")
    run_prepare([_corpus(tmp_path)], out, "--decontaminate", str(eval_path))
    with open(os.path.join(out, formats.REMOVALS_NAME)) as f:
        assert [json.loads(line)["eval_file"] for line in f] == [str(eval_path)]
