"""A cut document's exact key is the key of its whole normalized text, wherever the cuts fall:
before a whitespace, or inside a run of text with none (a long word, a URL, base64), where the
pieces join with no space, and inside a character sequence that Unicode normalization composes."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.prepare.clean.dedup.fingerprints import ExactKey, exact_key
from pipeline.prepare.read.documents import pieces_of
from support.corpora import write_jsonl, write_text
from support.runs import run_prepare


def key_of_pieces(text: str, limit: int) -> bytes:
    key = ExactKey()
    for piece in pieces_of(text.encode("utf-8", "surrogatepass"), limit):
        key.update(piece.decode("utf-8", "surrogatepass"))
    return key.digest()


@pytest.mark.integration
@pytest.mark.parametrize("write", [write_jsonl, write_text], ids=["jsonl", "text"])
def test_documents_equal_but_for_spaces_are_duplicates_when_cut_inside_a_run(tmp_path, write):
    run = "A" * 1500  # longer than --max-document-bytes, so cut inside it
    docs = ["intro words " + run, "intro words  " + run, "intro words " + "A" * 1499 + " A"]
    corpus = write(str(tmp_path / f"c.{'jsonl' if write is write_jsonl else 'txt'}"), docs)
    manifest = run_prepare(
        [corpus], str(tmp_path / "out"), "--dedup", "exact", "--max-document-bytes", "1024"
    )
    assert manifest.counts["cut_documents"] == 3
    assert manifest.removed == {"exact_duplicate": 1}


# Fragments that try the cuts: whitespace runs, long runs without any, combining marks and the
# starters that compose with the character before them (Hangul jamo, Kannada's length mark).
FRAGMENTS = [
    "a",
    "b",
    "AAAAAAAAAAAAAAAA",
    " ",
    "  ",
    "\n",
    "\t",
    "\u3000",
    "e\u0301",
    "\u0301",
    "\u0327",
    "\u1100\u1161",
    "\u1161",
    "\u11a8",
    "\u0cc6\u0cc2",
    "\u0cc2",
    "\u00e9",
    "日本",
    "🙂",
]
TEXT = st.lists(
    st.one_of(st.sampled_from(FRAGMENTS), st.characters(codec="utf-8", exclude_categories=["Cs"])),
    min_size=1,
    max_size=120,
).map("".join)


@settings(max_examples=300, deadline=None, database=None)
@given(text=TEXT, limit=st.integers(16, 64))
def test_the_key_of_a_documents_pieces_is_the_key_of_the_whole(text, limit):
    assert key_of_pieces(text, limit) == exact_key(text)
