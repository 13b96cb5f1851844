"""The readers on their own: every document read by exactly one unit, whatever the unit size, and
long documents cut into bounded pieces that join back into the document."""

from __future__ import annotations

import itertools
import json
import os
import random

import pytest

from pipeline.dataset.storage import FileInfo
from pipeline.prepare.read import SOURCES
from pipeline.prepare.read.base import (
    ContentDigest,
    separator_regex,
    split_at_separator_lines,
)
from pipeline.prepare.read.columnar import row_ranges
from pipeline.prepare.read.documents import DocumentPiece, Tally
from pipeline.prepare.units import WorkUnit
from schemas.prepare_config import PrepareConfig
from support.corpora import write_parquet
from support.reading import config, read_all

SEP = "<|endoftext|>"
LINES = [
    "Once upon a time.",
    SEP,
    f"  {SEP}  ",
    f"{SEP}\r",
    f"a {SEP} inside",
    "",
    "The end é.",
    "x" * 50,
    " ",
]


def whole_file_documents(data: bytes) -> tuple[list[str], int]:
    """The documents of a text file split whole, and how many blank ones it holds."""
    pieces = separator_regex(SEP).split(b"\n" + data.removeprefix(b"\xef\xbb\xbf") + b"\n")
    last = pieces.pop().decode("utf-8", "replace").strip()
    texts = [p.decode("utf-8", "replace").strip() for p in pieces]
    return [t for t in texts if t] + ([last] if last else []), sum(1 for t in texts if not t)


@pytest.mark.parametrize("seed", range(4))
def test_text_units_own_each_document_once(tmp_path, seed):
    rng = random.Random(seed)
    path = str(tmp_path / "x.txt")
    for _ in range(150):
        data = "\n".join(rng.choice(LINES) for _ in range(rng.randint(0, 40))).encode()
        data = (
            (b"\xef\xbb\xbf" if rng.random() < 0.2 else b"")
            + data
            + (b"\n" if rng.random() < 0.5 else b"")
        )
        with open(path, "wb") as f:
            f.write(data)
        documents, tally, _ = read_all(path, "text", config(rng.randint(1, 60)))
        expected, blank = whole_file_documents(data)
        assert documents == expected, data
        assert tally.skipped.get("empty_document", 0) == blank, data


def _words(rng: random.Random, n: int) -> str:
    return " ".join(
        rng.choice(["alpha", "beta", "γάμμα", "delta\n", "x" * rng.randint(1, 30)])
        for _ in range(n)
    )


@pytest.mark.parametrize("seed", range(3))
def test_long_documents_are_cut_into_bounded_pieces_that_join_back(tmp_path, seed):
    rng = random.Random(seed)
    for _ in range(20):
        docs = [
            _words(rng, rng.choice([3, 50, 400, 900])).strip() for _ in range(rng.randint(1, 12))
        ]
        cfg = config(rng.randint(50, 3000), max_document_bytes=1024)
        text = str(tmp_path / "l.txt")
        with open(text, "wb") as f:
            f.write("".join(f"{d}\n{SEP}\n" for d in docs).encode())
        documents, tally, _ = read_all(text, "text", cfg)
        assert documents == docs
        long = [d for d in docs if len(d.encode()) > 1024]
        assert tally.counts.get("cut_documents", 0) == len(long)
        # JSONL values are cut the same way; a line too long to parse is rejected, not held.
        jsonl = str(tmp_path / "l.jsonl")
        with open(jsonl, "w") as f:
            f.writelines(json.dumps({"text": d}) + "\n" for d in docs)
        documents, tally, _ = read_all(jsonl, "jsonl", cfg)
        assert documents == [d for d in docs if len(json.dumps({"text": d})) <= 4 * 1024]
        assert tally.skipped.get("line_too_long", 0) == len(docs) - len(documents)


def test_a_separator_free_file_is_one_document_in_pieces(tmp_path):
    path = str(tmp_path / "flat.txt")
    text = " ".join(f"word{i}" for i in range(200_000))
    with open(path, "w") as f:
        f.write(text)
    documents, tally, digests = read_all(
        path, "text", config(64 * 1024, max_document_bytes=16 * 1024)
    )
    assert documents == [text]
    assert tally.counts["cut_documents"] == 1 and tally.counts["document_pieces"] > len(text) // (
        16 * 1024
    )
    assert len(digests) > 20, "the other units own no document but hash their range"


def test_unit_digests_cover_the_file_exactly(tmp_path):
    import hashlib

    path = str(tmp_path / "c.jsonl")
    with open(path, "w") as f:
        f.writelines(json.dumps({"text": f"doc {i}"}) + "\n" for i in range(500))
    _, _, digests = read_all(path, "jsonl", config(997))
    data = open(path, "rb").read()
    assert digests == [
        hashlib.sha256(data[a : a + 997]).hexdigest() for a in range(0, len(data), 997)
    ]


@pytest.mark.integration
def test_jsonl_lines_are_each_read_once(tmp_path):
    rng = random.Random(3)
    lines = [json.dumps({"text": _words(rng, rng.randint(1, 30))}) for _ in range(300)]
    path = str(tmp_path / "c.jsonl")
    with open(path, "w") as f:
        f.write("\n".join(lines))  # no newline at the end
    for unit_bytes in (1, 7, 100, 4096):
        documents, _, _ = read_all(path, "jsonl", config(unit_bytes))
        assert documents == [json.loads(line)["text"] for line in lines]


def test_row_ranges_join_small_groups_and_split_large_ones():
    assert row_ranges([(10, 100), (10, 100), (10, 100)], 250) == [(0, 20), (20, 30)]
    assert row_ranges([(10, 100), (100, 1000), (5, 10)], 300) == [
        (0, 10),
        (10, 35),
        (35, 60),
        (60, 85),
        (85, 110),
        (110, 115),
    ]
    assert row_ranges([], 100) == []
    for groups in itertools.product([(7, 50), (30, 900), (1, 5)], repeat=3):
        ranges = row_ranges(list(groups), 200)
        assert ranges[0][0] == 0 and ranges[-1][1] == sum(g[0] for g in groups)
        assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))


def test_parquet_row_ranges_inside_row_groups(tmp_path):
    docs = [f"row {i} " + "pad " * (i % 17) for i in range(1000)]
    path = write_parquet(str(tmp_path / "p.parquet"), docs, row_group_size=400)
    documents, _, digests = read_all(path, "parquet", config(2000))
    assert documents == docs
    assert len(digests) > 3, "row groups larger than a unit are split"


def test_fast_split_cuts_where_the_regex_cuts():
    for lines in itertools.product(LINES[:7], repeat=4):
        data = "\n".join(lines).encode()
        fast = split_at_separator_lines(data, SEP)
        regex = separator_regex(SEP).split(b"\n" + data + b"\n")
        assert [p.strip() for p in fast] == [p.strip() for p in regex], lines


def test_parquet_units_are_sized_from_the_text_column_after_a_struct_column(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    texts = [
        f"{i:04d} " + "w" * 995 for i in range(1280)
    ]  # 1.28 MB of text in one row group: 20 units of 64 KB
    meta = [{"a": i, "b": "tiny"} for i in range(len(texts))]
    path = str(tmp_path / "s.parquet")
    pq.write_table(pa.table({"meta": meta, "text": texts}), path, row_group_size=len(texts))
    ranges = SOURCES["parquet"].plan(path, FileInfo(os.path.getsize(path), "v"), config(64 * 1024))
    assert len(ranges) == 20
    assert read_all(path, "parquet", config(64 * 1024))[0] == texts


def test_a_cut_document_never_ends_in_an_empty_piece(tmp_path):
    # Cut before the whitespace at the bound, the document's rest is whitespace only. It runs on
    # past its unit's range, where documents are read in pieces.
    path = tmp_path / "c.txt"
    path.write_bytes(b"x" * 600 + b" " * 500 + f"\n{SEP}\nnext\n".encode())
    cfg = config(4096, max_document_bytes=1024)
    tally, pieces = Tally(), []
    size = os.path.getsize(path)
    for read in SOURCES["text"].read(
        WorkUnit(0, 0, str(path), "text", 0, 10, size, "v"), cfg, tally, ContentDigest()
    ):
        pieces += [read.text] if isinstance(read, DocumentPiece) else []
    assert all(p.strip() for p in pieces), pieces
    assert tally.counts["document_pieces"] == len(pieces)


@pytest.mark.parametrize("unit_bytes", [1000, 4096, 5000, 9000, 2**20])
def test_which_jsonl_lines_are_too_long_does_not_depend_on_chunks_or_units(tmp_path, unit_bytes):
    import gzip

    long_line = json.dumps({"text": "y" * 4500}).encode() + b"\n"
    short = json.dumps({"text": "short"}).encode() + b"\n"
    data = short + long_line * 3 + short
    (tmp_path / "l.jsonl").write_bytes(data)
    (tmp_path / "l.jsonl.gz").write_bytes(gzip.compress(data, mtime=0))
    cfg = config(unit_bytes, max_document_bytes=1024)
    for name in ("l.jsonl", "l.jsonl.gz"):
        documents, tally, _ = read_all(str(tmp_path / name), "jsonl", cfg)
        assert documents == ["short", "short"], name
        assert tally.skipped == {"line_too_long": 3}, name


def test_an_empty_row_group_gives_no_unit():
    assert row_ranges([(0, 100), (10, 50)], 40) == [(0, 5), (5, 10)]
    assert row_ranges([(0, 100)], 1) == []


def _pieces(path: str, fmt: str, config: PrepareConfig) -> tuple[list[list[str]], Tally]:
    """The pieces of every cut document, document by document, and the tally."""
    size = os.path.getsize(path)
    cut, tally = [], Tally()
    for i, (start, end) in enumerate(SOURCES[fmt].plan(path, FileInfo(size, "v"), config)):
        for read in SOURCES[fmt].read(
            WorkUnit(i, 0, path, fmt, start, end, size, "v"), config, tally, ContentDigest()
        ):
            if isinstance(read, DocumentPiece):
                cut += [[]] if read.first else []
                cut[-1].append(read.text)
    return cut, tally


def test_a_long_document_is_cut_the_same_way_whatever_the_unit_size_or_format(tmp_path):
    rng = random.Random(4)
    docs = [
        " ".join(f"w{rng.randrange(10**5)}" for _ in range(rng.randint(150, 500)))
        for _ in range(20)
    ]
    docs += ["short"] * 3
    rng.shuffle(docs)
    text = write_text_file(tmp_path / "long.txt", docs)
    jsonl = tmp_path / "long.jsonl"
    jsonl.write_text("".join(json.dumps({"text": d}) + "\n" for d in docs))
    expected, _ = _pieces(str(jsonl), "jsonl", config(4096, max_document_bytes=1024))
    assert len(expected) == 20
    for unit_bytes in (4096, 10_000, 2**20):
        pieces, tally = _pieces(text, "text", config(unit_bytes, max_document_bytes=1024))
        assert pieces == expected, unit_bytes
        assert tally.counts["cut_documents"] == 20


def write_text_file(path, docs: list[str]) -> str:
    path.write_text("".join(f"{d}\n{SEP}\n" for d in docs))
    return str(path)


def test_documents_carry_the_line_or_row_they_start_on(tmp_path):
    path = tmp_path / "t.txt"
    path.write_text(
        f"first\nstill first\n{SEP}\n\nsecond\n  {SEP}\r\nthird\n{SEP}\n{SEP}\nfourth\n"
    )
    reads = list(
        SOURCES["text"].read(
            WorkUnit(0, 0, str(path), "text", 0, path.stat().st_size, path.stat().st_size, "v"),
            config(4096),
            Tally(),
            ContentDigest(),
            located=True,
        )
    )
    located = [(t, line) for read in reads for t, line in zip(read.texts, read.locations)]
    # Lines from 0, counted as rejects count them: the line after each separator line.
    assert located == [("first\nstill first", 0), ("second", 3), ("third", 6), ("fourth", 9)]


@pytest.mark.parametrize(
    "data",
    [
        "a\nSEP\n\nSEP\nb\n",
        "SEP\na\nSEP\nSEP\n b \n  SEP\r\nc\nSEP",
        "\nSEP\nx\n",
        "a SEP b\n",
        "SEP",
        "x\nSEP\n\n\nSEP\n",
    ],
)
def test_lines_between_pieces_add_up_to_the_data(data):
    from pipeline.prepare.read.base import separated

    for form in (data, data.encode()):
        pieces, between = separated(form, "SEP")
        assert len(between) == len(pieces) - 1
        assert sum(p.count("\n" if isinstance(form, str) else b"\n") for p in pieces) + sum(
            between
        ) == data.count("\n")
