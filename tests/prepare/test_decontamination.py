"""Decontamination against eval files: common text (a footer every page shares) is not
contamination, eval files are read in every format a user has, and an eval file is part of what a
rerun compares."""

from __future__ import annotations

import gzip
import json
import os
import random

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard

from pipeline.prepare.clean.dedup.fingerprints import words
from pipeline.prepare.launcher import PrepareError
from schemas import formats
from support.corpora import write_jsonl, write_text
from support.runs import run_prepare

FOOTER = (
    "(c) Copyright 2001-2026, Python Software Foundation. This page is licensed under the Python "
    "Software Foundation License Version 2. Examples, recipes, and other code in the documentation "
    "are additionally licensed under the Zero Clause BSD License. See History and License for more "
    "information."
)
_VOCABULARY = (
    "module function class method argument return value object list string file path error "
    "exception import package install version release thread process socket buffer byte encoding "
    "stream parser token iterator generator decorator context manager attribute dictionary tuple "
    "integer float index slice loop condition"
).split()


def _prose(rng: random.Random, n: int) -> str:
    return " ".join(
        rng.choice(_VOCABULARY) + rng.choice(["", "", "s", "ed", "ing"]) for _ in range(n)
    )


def _lines(path: str) -> list[dict]:
    with open(path) as f:
        return [json.loads(line) for line in f]


@pytest.mark.integration
def test_pages_sharing_a_footer_with_eval_passages_are_kept_and_leaked_passages_removed(tmp_path):
    # Held-out style: documentation pages that all end in the same licence footer, and eval passages
    # of which a few quote that footer. Only pages holding a distinctive passage are contaminated.
    rng = random.Random(7)
    passages = [_prose(rng, 40) for _ in range(30)]
    quoting = [passages[i] + " " + FOOTER for i in range(4)]  # 4 of 30 passages quote the footer
    eval_path = write_jsonl(str(tmp_path / "eval.jsonl"), quoting + passages[4:], field="passage")
    pages, leaked = [], set()
    for i in range(400):
        body = [f"Page {i}: " + _prose(rng, rng.randint(150, 400))]
        if i % 25 == 3:  # 16 pages quote 20 words of a passage, footer-quoting ones included
            passage = passages[(i // 25) % 30].split()
            start = rng.randrange(len(passage) - 20)
            body.append(" ".join(passage[start : start + 20]))
            leaked.add(i)
        body.append(_prose(rng, 50))
        pages.append("\n\n".join(body) + "\n\n" + FOOTER)
    out = str(tmp_path / "out")
    manifest = run_prepare(
        [write_jsonl(str(tmp_path / "pages.jsonl"), pages)], out, "--decontaminate", eval_path
    )
    removed = {r["line"] - 1 for r in _lines(os.path.join(out, formats.REMOVALS_NAME))}
    assert leaked <= removed
    # A few others go: an n-gram of a passage's last word and the footer's first twelve is rare
    # text, found in the pages whose prose ends in that word.
    others = len(pages) - len(leaked)
    assert (others - len(removed - leaked)) / others >= 0.95
    assert manifest.removed == {"contaminated": len(removed)}
    # The footer's n-grams are in every page: too common to count, and reported.
    footer_ngrams = len(words(FOOTER)) - 13 + 1
    common = _lines(os.path.join(out, formats.COMMON_NGRAMS_NAME))
    assert len(common) == footer_ngrams and {c["documents"] for c in common} == {len(pages)}
    assert {c["eval_file"] for c in common} == {eval_path}
    assert common[0]["ngram"] in " ".join(words(FOOTER))
    (info,) = manifest.eval_files
    assert (info.examples, info.common_ngrams, info.removed) == (30, footer_ngrams, len(removed))


@pytest.mark.integration
def test_an_ngram_in_more_documents_than_the_limit_is_common_text(tmp_path):
    rng = random.Random(1)
    rare, common = _prose(rng, 20), _prose(rng, 20)
    eval_path = write_jsonl(str(tmp_path / "eval.jsonl"), [rare, common])
    docs = [_prose(rng, 30) + " " + rare for _ in range(3)] + [
        common + " " + _prose(rng, 30) for _ in range(4)
    ]
    docs += [_prose(rng, 30) for _ in range(5)]
    out = str(tmp_path / "out")
    manifest = run_prepare(
        [write_jsonl(str(tmp_path / "c.jsonl"), docs)],
        out,
        "--decontaminate",
        eval_path,
        "--decontaminate-max-matches",
        "3",
    )
    assert [r["line"] for r in _lines(os.path.join(out, formats.REMOVALS_NAME))] == [1, 2, 3], (
        "3 documents: contamination"
    )
    assert manifest.removed == {"contaminated": 3}
    listed = _lines(os.path.join(out, formats.COMMON_NGRAMS_NAME))
    assert {c["documents"] for c in listed} == {4} and len(listed) == 20 - 13 + 1, (
        "4 documents: common text"
    )


def _mmlu_record(question: str, choice: str) -> dict:
    return {
        "question": question,
        "choices": ["alpha", choice, "gamma"],
        "answer": 1,
        "meta": {"id": 3},
    }


def _write(path, data: bytes) -> str:
    if path.name.endswith(".gz"):
        data = gzip.compress(data, mtime=0)
    elif path.name.endswith(".zst"):
        data = zstandard.ZstdCompressor().compress(data)
    path.write_bytes(data)
    return str(path)


EVAL_FORMATS = {
    "jsonl.gz": lambda p, q, c: _write(p, (json.dumps(_mmlu_record(q, c)) + "\n").encode()),
    "jsonl.zst": lambda p, q, c: _write(p, (json.dumps(_mmlu_record(q, c)) + "\n").encode()),
    "json": lambda p, q, c: _write(p, json.dumps([_mmlu_record(q, c)], indent=2).encode()),
    "json.gz": lambda p, q, c: _write(p, json.dumps({"data": [_mmlu_record(q, c)]}).encode()),
    "ndjson": lambda p, q, c: _write(p, (json.dumps(_mmlu_record(q, c)) + "\n").encode()),
    "parquet": lambda p, q, c: (
        pq.write_table(pa.Table.from_pylist([_mmlu_record(q, c)]), str(p)),
        str(p),
    )[1],
    "txt.zst": lambda p, q, c: _write(p, f"{q}\n<|endoftext|>\n{c}\n".encode()),
}


@pytest.mark.integration
@pytest.mark.parametrize("suffix", sorted(EVAL_FORMATS))
def test_eval_examples_are_read_from_every_format_and_nesting(tmp_path, suffix):
    rng = random.Random(2)
    question, choice = (
        _prose(rng, 15),
        _prose(rng, 15),
    )  # the choice sits in a list inside each record
    eval_path = EVAL_FORMATS[suffix](tmp_path / f"eval.{suffix}", question, choice)
    docs = [
        _prose(rng, 40) + " " + choice + " " + _prose(rng, 40),
        _prose(rng, 80),
        question + " " + _prose(rng, 5),
    ]
    out = str(tmp_path / "out")
    manifest = run_prepare(
        [write_jsonl(str(tmp_path / "c.jsonl"), docs)], out, "--decontaminate", eval_path
    )
    assert [
        (r["line"], r["eval_file"]) for r in _lines(os.path.join(out, formats.REMOVALS_NAME))
    ] == [(1, eval_path), (3, eval_path)]
    assert manifest.eval_files[0].examples >= 2


@pytest.mark.parametrize(
    "name, data, message",
    [
        ("empty.jsonl", b"", "no eval example in it"),
        ("numbers.json", b'[1, 2, {"answer": 3}]', "no eval example in it"),
        ("blank.txt", b"<|endoftext|>\n  \n<|endoftext|>\n", "no eval example in it"),
        ("short.jsonl", b'{"q": "only a few words here"}\n', "none of its 1 examples has 13 words"),
    ],
)
def test_an_eval_file_that_cannot_match_is_refused_in_one_line(tmp_path, name, data, message):
    path = tmp_path / name
    path.write_bytes(data)
    corpus = write_jsonl(str(tmp_path / "c.jsonl"), ["some text of a document"])
    with pytest.raises(PrepareError, match=message) as raised:
        run_prepare([corpus], str(tmp_path / "out"), "--decontaminate", str(path))
    assert "\n" not in str(raised.value) and str(path) in str(raised.value)
    assert not os.path.exists(tmp_path / "out")


@pytest.mark.integration
def test_an_edited_eval_file_is_refused_on_rerun_like_an_edited_input(tmp_path):
    rng = random.Random(3)
    passages = [_prose(rng, 20) for _ in range(2)]
    docs = [_prose(rng, 30) + " " + passages[1], _prose(rng, 30)]
    corpus = write_jsonl(str(tmp_path / "c.jsonl"), docs)
    eval_path = write_jsonl(str(tmp_path / "eval.jsonl"), passages[:1])
    out = str(tmp_path / "out")
    assert run_prepare([corpus], out, "--decontaminate", eval_path).removed == {}
    write_jsonl(eval_path, passages)
    with pytest.raises(PrepareError, match="different eval files; pass --overwrite"):
        run_prepare([corpus], out, "--decontaminate", eval_path)
    assert run_prepare([corpus], out, "--decontaminate", eval_path, "--overwrite").removed == {
        "contaminated": 1
    }


@pytest.mark.integration
def test_decontamination_alone_removes_no_duplicates(tmp_path):
    rng = random.Random(4)
    passage = _prose(rng, 20)
    copy = _prose(rng, 30)
    docs = [copy, copy, copy, _prose(rng, 10) + " " + passage]
    out = str(tmp_path / "out")
    manifest = run_prepare(
        [write_text(str(tmp_path / "c.txt"), docs)],
        out,
        "--decontaminate",
        write_jsonl(str(tmp_path / "eval.jsonl"), [passage]),
    )
    assert manifest.config.dedup == "none"
    assert manifest.removed == {"contaminated": 1} and manifest.totals["train"].documents == 3
