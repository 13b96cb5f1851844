"""Standing properties of the readers, over random documents in random formats and unit sizes:
every document comes out exactly once, in order, or is counted as skipped with its reason; never
both, never neither.

Documents mix unicode, CRLF line ends, a byte-order mark, blank lines, lines that look like the
separator without being one, and documents longer than the cut bound (read back in pieces). The
fast tier runs a bounded number of examples per format (`FAST`); the slow tier runs the `LONG`
profile. A few examples also go through the real prepare.
"""

from __future__ import annotations

import collections
import gzip
import json
import os
import tempfile

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from pipeline.prepare.launcher import PrepareError
from pipeline.prepare.read.base import BOM, separator_regex
from pipeline.prepare.read.documents import EMPTY, LINE_TOO_LONG, MISSING_TEXT
from pipeline.tokenization.tiktoken_backend import load_encoding
from support.reading import config, read_all
from support.runs import decoded_documents, run_prepare

FAST, LONG = "fast", "long"
settings.register_profile(
    FAST,
    max_examples=20,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    LONG,
    max_examples=400,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
PROFILES = [FAST, pytest.param(LONG, marks=pytest.mark.slow)]

MAX_DOCUMENT_BYTES = 1024  # the config's minimum: long documents stay small
SEPARATORS = ["<|endoftext|>", "----", "  ===", "\t§§"]
_CHARACTERS = st.characters(codec="utf-8", exclude_characters="\n\r")
_PLAIN_LINES = st.one_of(
    st.text(_CHARACTERS, max_size=30),
    st.sampled_from(
        [
            "",
            "   ",
            "\t \t",
            "héllo wörld",
            "日本語のテキスト",
            "emoji 🙂 here",
            "\ufeffmid-text mark",
        ]
    ),
)


def _long_document(draw) -> str:
    """Over the cut bound: words (cut at whitespace) or one unbroken run (cut between
    characters)."""
    if draw(st.booleans()):
        return " ".join(f"w{i}é" for i in range(draw(st.integers(300, 600))))
    return draw(st.sampled_from(["é", "日", "x", "🙂"])) * draw(st.integers(700, 1500))


@st.composite
def documents(draw, near_misses: list[str]) -> list[str]:
    lines = st.one_of(_PLAIN_LINES, st.sampled_from(near_misses)) if near_misses else _PLAIN_LINES
    docs = []
    for _ in range(draw(st.integers(0, 12))):
        if draw(st.integers(0, 9)) == 0:
            docs.append(_long_document(draw))
        else:
            end = draw(st.sampled_from(["\n", "\r\n"]))
            docs.append(end.join(draw(st.lists(lines, max_size=5))))
    return docs


def _near_misses(separator: str) -> list[str]:
    core = separator.strip()
    misses = [f"a {core}", f"{core}x", core[:-1], f"{separator} {separator}"]
    return misses + ([core] if core != separator else [])  # without its indent, no separator


def _unit_bytes(draw) -> int:
    return draw(st.one_of(st.integers(1, 300), st.integers(300, 5000), st.just(2**20)))


@pytest.mark.parametrize("profile", PROFILES)
def test_text(profile):
    @settings(settings.get_profile(profile))
    @given(data=st.data())
    def check(data):
        separator = data.draw(st.sampled_from(SEPARATORS))
        docs = data.draw(documents(_near_misses(separator)))
        pattern = separator_regex(separator, text=True)
        assume(not any(pattern.search("\n" + d + "\n") for d in docs))
        ends = [data.draw(st.sampled_from(["\n", "\r\n"])) for _ in docs]
        trailing = data.draw(st.sampled_from(["", "  \n", "last words"]))
        body = "".join(f"{d}{e}{separator}{e}" for d, e in zip(docs, ends)) + trailing
        bom = data.draw(st.booleans())
        raw = (BOM if bom else b"") + body.encode("utf-8")
        if docs and not bom and docs[0].startswith("\ufeff"):
            docs[0] = docs[0][
                1:
            ]  # a mark that starts the file is its byte-order mark, whoever put it there
        expected = [d.strip() for d in docs if d.strip()] + (
            [trailing.strip()] if trailing.strip() else []
        )
        empty = sum(1 for d in docs if not d.strip())
        cfg = config(_unit_bytes(data.draw), MAX_DOCUMENT_BYTES)
        object.__setattr__(cfg, "separator", separator)
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "c.txt")
            open(path, "wb").write(raw)
            read, tally, _ = read_all(path, "text", cfg)
        # A cut document's pieces keep the blanks at their cuts: compare documents stripped.
        assert [d.strip() for d in read] == expected
        assert dict(tally.skipped) == ({EMPTY: empty} if empty else {})

    check()


def _jsonl_bytes(lines: list[bytes], compression: str) -> bytes:
    data = b"".join(lines)
    if compression == "gz":
        return gzip.compress(data, mtime=0)
    if compression == "zst":
        return zstandard.ZstdCompressor().compress(data)
    return data


@pytest.mark.parametrize("profile", PROFILES)
def test_jsonl(profile):
    @settings(settings.get_profile(profile))
    @given(data=st.data())
    def check(data):
        docs = data.draw(documents([]))
        bom = data.draw(st.booleans())
        limit = 4 * MAX_DOCUMENT_BYTES  # longer lines are refused unparsed
        lines, expected, skipped, blank = [], [], collections.Counter(), 0
        for doc in docs:
            if data.draw(st.integers(0, 5)) == 0:
                lines.append(data.draw(st.sampled_from([b"\n", b"  \n", b"\r\n"])))
                blank += 1
            line = json.dumps({"text": doc}, ensure_ascii=data.draw(st.booleans())).encode()
            line += data.draw(st.sampled_from([b"\n", b"\r\n"]))
            if bom and not lines:
                line = BOM + line
            lines.append(line)
            if len(line.rstrip(b"\n")) > limit:
                skipped[LINE_TOO_LONG] += 1
            elif not doc.strip():
                skipped[EMPTY] += 1
            else:
                expected.append(doc)
        compression = data.draw(st.sampled_from(["", "gz", "zst"]))
        cfg = config(_unit_bytes(data.draw), MAX_DOCUMENT_BYTES)
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "c.jsonl" + (f".{compression}" if compression else ""))
            open(path, "wb").write(_jsonl_bytes(lines, compression))
            read, tally, _ = read_all(path, "jsonl", cfg)
        assert read == expected
        assert tally.skipped == skipped
        assert tally.counts.get("blank_jsonl_lines", 0) == blank

    check()


@pytest.mark.parametrize("profile", PROFILES)
def test_parquet(profile):
    @settings(settings.get_profile(profile))
    @given(data=st.data())
    def check(data):
        docs = data.draw(documents([]))
        values = [None if data.draw(st.integers(0, 7)) == 0 else d for d in docs]
        expected = [v for v in values if v is not None and v.strip()]
        skipped = collections.Counter(
            MISSING_TEXT if v is None else EMPTY for v in values if v is None or not v.strip()
        )
        cfg = config(_unit_bytes(data.draw), MAX_DOCUMENT_BYTES)
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "c.parquet")
            table = pa.table(
                {"id": list(range(len(values))), "text": pa.array(values, pa.string())}
            )
            pq.write_table(table, path, row_group_size=data.draw(st.integers(1, 8)))
            read, tally, _ = read_all(path, "parquet", cfg)
        assert read == expected
        assert tally.skipped == skipped

    check()


@pytest.mark.integration
@pytest.mark.parametrize("profile", PROFILES)
def test_prepare(profile):
    """Through the real prepare (in one process): the documents that come back, as a multiset,
    and the manifest's skip counts. Short documents only: a cut one comes back in pieces."""
    encoding = load_encoding("gpt2")

    @settings(settings.get_profile(profile), max_examples=3 if profile == FAST else 15)
    @given(docs=documents(_near_misses("<|endoftext|>")), unit_bytes=st.sampled_from([4096, 2**20]))
    def check(docs, unit_bytes):
        docs = [d for d in docs if len(d.encode()) < MAX_DOCUMENT_BYTES]
        if docs and docs[0].startswith("\ufeff"):
            docs[0] = docs[0][1:]  # what starts the file is its byte-order mark
        pattern = separator_regex("<|endoftext|>", text=True)
        assume(not any(pattern.search("\n" + d + "\n") for d in docs))
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "c.txt")
            open(path, "wb").write("".join(f"{d}\n<|endoftext|>\n" for d in docs).encode())
            out = os.path.join(tmp, "out")
            empty = sum(1 for d in docs if not d.strip())
            if empty == len(docs):  # a run with no training data fails, saying why
                with pytest.raises(
                    PrepareError,
                    match="no training data: (every document was skipped|the input .* is empty)",
                ):
                    run_prepare([path], out, "--unit-bytes", str(unit_bytes))
                return
            manifest = run_prepare([path], out, "--unit-bytes", str(unit_bytes))
            got = decoded_documents(out, encoding)
        assert sorted(got) == sorted(d.strip() for d in docs if d.strip())
        assert manifest.skipped == ({EMPTY: empty} if empty else {})

    check()
