"""Near deduplication never takes a document for a copy of one it hardly resembles: below the low
end of the S-curve docs/data-format.md tabulates (5-gram Jaccard similarity 0.2, where a pair shares
a band with probability 4e-5), no generated pair is removed, and documents with no shingle (fewer
words than a shingle, or none) are never near duplicates of anything."""

from __future__ import annotations

import json
import os
import tempfile

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from pipeline.prepare.clean.dedup.fingerprints import words
from pipeline.prepare.clean.removals import NEAR, duplicates, places
from pipeline.prepare.clean.unit_fingerprints import fingerprint_unit
from pipeline.prepare.units import WorkUnit
from schemas.prepare_config import PrepareConfig
from support.examples import tiered

LOW = 0.2
NGRAM = 5
_WORDS = [
    "the",
    "fox",
    "jumps",
    "over",
    "lazy",
    "dog",
    "and",
    "cat",
    "sat",
    "on",
    "mat",
    "Fox,",
    "DOG!",
    "—",
    "🙂",
]


def _shingles(text: str) -> set[tuple[str, ...]]:
    found = words(text)
    return {tuple(found[i : i + NGRAM]) for i in range(len(found) - NGRAM + 1)}


def _jaccard(a: str, b: str) -> float | None:
    """None where either document has no shingle: similarity is then undefined."""
    first, second = _shingles(a), _shingles(b)
    if not first or not second:
        return None
    return len(first & second) / len(first | second)


@st.composite
def pairs(draw) -> tuple[str, str]:
    """A document and another: unrelated, a run of the first between other words, or the first with
    words replaced, inserted or deleted."""
    text = st.lists(st.sampled_from(_WORDS), max_size=80)
    keeper = draw(st.one_of(text, st.lists(st.sampled_from(_WORDS), min_size=20, max_size=80)))
    kind = draw(st.sampled_from(["unrelated", "spliced", "edited"]))
    if kind == "unrelated":
        other = draw(text)
    elif kind == "spliced":
        start = draw(st.integers(0, len(keeper)))
        end = draw(st.integers(start, len(keeper)))
        other = draw(text) + keeper[start:end] + draw(text)
    else:
        other = list(keeper)
        for _ in range(draw(st.integers(0, 30))):
            at = draw(st.integers(0, len(other)))
            edit = draw(st.sampled_from(["replace", "insert", "delete"]))
            word = draw(st.sampled_from(_WORDS))
            if edit == "insert" or not other:
                other.insert(at, word)
            elif edit == "delete":
                del other[min(at, len(other) - 1)]
            else:
                other[min(at, len(other) - 1)] = word
    return " ".join(keeper), " ".join(other)


def _near_removed(keeper: str, other: str) -> bool:
    """Whether `other`, after `keeper` in one unit, is removed as its near duplicate: fingerprinted
    by the stage's own reading of a unit, its band keys grouped by the stage's keeper rule."""
    config = PrepareConfig(dedup="near")
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "pair.jsonl")
        with open(path, "w") as f:
            f.write("".join(json.dumps({"text": t}) + "\n" for t in (keeper or "-", other or "-")))
        size = os.path.getsize(path)
        found = fingerprint_unit(WorkUnit(0, 0, path, "jsonl", 0, size, size, "v"), config, None)
    if not len(found.near_numbers):
        return False
    rows = found.near_keys.shape[1]
    numbers = np.repeat(found.near_numbers, rows)
    parts = [(places(0, numbers), numbers, found.near_keys.reshape(-1, 1))]
    return any(number == 1 for _, number, *_ in duplicates(NEAR, parts))


@pytest.mark.parametrize("examples", tiered(60, 400))
def test_no_pair_below_the_curves_low_end_is_removed(examples):
    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        derandomize=True,
        suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow],
    )
    @given(pairs())
    def check(pair):
        keeper, other = pair
        similarity = _jaccard(keeper, other)
        assume(similarity is None or similarity < LOW)
        assert not _near_removed(keeper, other), (similarity, keeper, other)

    check()


def test_the_check_itself_sees_a_copy():
    text = " ".join(_WORDS * 3)
    assert _near_removed(text, text + " and more")
