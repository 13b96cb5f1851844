"""The fast filters against datatrove's own: the same parameters, the same words and sentences as
datatrove's spaCy split, the same decisions whatever the process, the batches or the cache, and
the same errors for parameters the rules cannot use. The agreement over about two thousand
documents is test_filter_agreement.py's (slow). The tests that split hundreds of documents with
spaCy or run datatrove's classes over them, or start a process, are marked integration."""

from __future__ import annotations

import json
import os
import random
import string
import subprocess
import sys

import numpy as np
import pytest
from datatrove.utils.text import split_into_sentences
from datatrove.utils.word_tokenizers import load_word_tokenizer

from pipeline.prepare.clean.judgments import FilterError
from pipeline.prepare.clean.quality import c4_quality, gopher_quality
from pipeline.prepare.clean.quality.c4_quality import sentence_counts
from pipeline.prepare.clean.quality.datatrove_filters import class_parameters
from pipeline.prepare.clean.quality.fast_filters import FastFilters
from pipeline.prepare.clean.quality.quality_filters import (
    check_filters,
    parameters,
    quality_filters,
)
from pipeline.prepare.clean.quality.word_cache import WordCache, Words, english
from pipeline.prepare.clean.quality.word_chunks import chunks, hashes_of
from schemas.prepare_config import FILTER_NAMES
from support.filter_reference import mixed_documents
from support.runs import REPO

CHAIN = list(FILTER_NAMES)


def test_parameters_are_datatrove_s_names_and_defaults():
    for name in FILTER_NAMES:
        assert parameters(name) == class_parameters(name), name
    with pytest.raises(TypeError):
        FastFilters(["c4"], {"c4": {"no_such_parameter": 1}})
    with pytest.raises(FilterError, match="unknown filter"):
        parameters("no-such-filter")


def test_the_rules_constants_are_datatrove_s():
    from datatrove.pipeline.filters import c4_filters, gopher_quality_filter

    assert c4_quality.CITATION_REGEX.pattern == c4_filters.CITATION_REGEX.pattern
    assert (c4_quality.END_PUNCTUATION, c4_quality.ELLIPSIS) == (
        c4_filters.END_PUNCTUATION,
        c4_filters.ELLIPSIS,
    )
    assert list(c4_quality.POLICY_SUBSTRINGS) == c4_filters.POLICY_SUBSTRINGS
    assert list(gopher_quality.STOP_WORDS) == gopher_quality_filter.STOP_WORDS


@pytest.mark.integration
def test_the_launcher_checks_the_fast_rules_without_spacy():
    """Checking the parameters before a run imports neither spaCy nor datatrove's filters (most of a
    second), yet refuses what the rules cannot use, as judging would."""
    code = (
        "import sys; from pipeline.prepare.clean.quality.quality_filters import check_filters;"
        f"check_filters({CHAIN!r}, {{'c4': {{'split_paragraph': False}}}}, 'fast');"
        "print(sorted(m for m in sys.modules"
        " if m.split('.')[0] == 'spacy' or m.startswith('datatrove.pipeline')))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, check=True, capture_output=True, text=True
    )
    assert done.stdout.strip() == "[]"
    for params in (
        {"gopher-quality": {"stop_words": 5}},
        {"gopher-quality": {"min_doc_words": "many"}},
        {"c4": {"min_num_sentences": "five"}},
        {"fineweb": {"short_line_length": "x"}},
        {"gopher-repetition": {"top_n_grams": [[2, "x"]]}},
    ):
        for impl in ("fast", "datatrove"):
            with pytest.raises(FilterError):
                check_filters(list(params), params, impl)


@pytest.mark.integration
def test_the_filters_load_spacy_without_torch():
    """torch is installed here (a reader's extra), and thinc would import it with spaCy, for two to
    three seconds of every filtered run's start: both implementations' preload leaves it out, and
    it stays importable afterwards."""
    code = (
        "import sys; from pipeline.prepare.clean.quality.quality_filters import preload;"
        "preload('fast'); preload('datatrove'); import spacy, thinc.compat;"
        "print('torch' in sys.modules, thinc.compat.has_torch);"
        "import torch; print(bool(torch.__version__))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, check=True, capture_output=True, text=True
    )
    assert done.stdout.split() == ["False", "False", "True"]


@pytest.mark.integration
def test_words_are_datatrove_s_spacy_words():
    """Per document, the words (as hashes and lengths) are datatrove's English `word_tokenize`."""
    docs = [d for d in mixed_documents(300, seed=11) if len(d) < 100_000]
    cache = WordCache()
    found = chunks(docs)
    hashes, lengths, bounds = Words(cache, cache.ids(found), found.bounds).sequences()
    spacy_words = load_word_tokenizer("en")
    for i, doc in enumerate(docs):
        expected = spacy_words.word_tokenize(doc)
        assert hashes[bounds[i] : bounds[i + 1]].tolist() == hashes_of(expected).tolist(), doc[:200]
        assert lengths[bounds[i] : bounds[i + 1]].tolist() == [len(w) for w in expected]


@pytest.mark.integration
def test_sentence_counts_are_spacy_s():
    """What C4 counts per kept line: datatrove's `split_into_sentences`, whitespace tokens
    included."""
    lines = [
        line.strip()
        for d in mixed_documents(200, seed=12)
        for line in d.splitlines()
        if line.strip()
    ][:3000]
    lines += [
        "Hi.  There",
        "Hi.\tThere",
        "Hi. There ",
        "Hi.  ",
        "Hi.\t",
        "Hi.\xa0",
        " Hi. there",
        "A. B. C.",
        "Wait... what?! Yes.",
        "x.\xa0y",
        "Hello [1]. World ",
        "。Done！Next？",
        "(Yes.) (No.) Maybe",
    ]
    assert sentence_counts(WordCache(), lines).tolist() == [
        len(split_into_sentences(line)) for line in lines
    ]


def test_a_chunk_of_letters_is_one_spacy_word():
    """The one rule the word cache knows of spaCy's English: a chunk of letters alone that is no
    special case is one word. Checked here on letters of every script (all of them in the slow
    tier) and on every pair of ASCII letters."""
    nlp = english()[0]
    step = 1 if os.environ.get("TOKSHARDS_ALL_LETTERS") else 61
    letters = [chr(c) for c in range(0, 0x110000, 1) if chr(c).isalpha()][::step]
    probes = [w for c in letters for w in (c, f"a{c}b", c * 3)]
    probes += [a + b for a in string.ascii_letters for b in string.ascii_letters]
    probes = [p for p in probes if p not in nlp.tokenizer.rules]
    with nlp.memory_zone():
        assert len(nlp.tokenizer(" ".join(probes))) == len(probes)


@pytest.mark.slow
def test_every_letter_is_one_spacy_word(monkeypatch):
    monkeypatch.setenv("TOKSHARDS_ALL_LETTERS", "1")
    test_a_chunk_of_letters_is_one_spacy_word()


@pytest.mark.integration
def test_the_chain_decides_as_datatrove_on_a_sample():
    """A quick look at what test_filter_agreement.py measures: the chain's reasons and kept
    texts."""
    docs = mixed_documents(120, seed=13)
    assert FastFilters(CHAIN, {}).judge_many(docs) == quality_filters(
        CHAIN, {}, "datatrove"
    ).judge_many(docs)


@pytest.mark.integration
def test_decisions_do_not_depend_on_batches_cache_or_process():
    """Decisions use content-derived hashes only: one document at a time, other batches, a warm
    cache or a cold one in another process with another PYTHONHASHSEED give the same results."""
    docs = mixed_documents(150, seed=14)
    whole = FastFilters(CHAIN, {}).judge_many(docs)
    warm = FastFilters(CHAIN, {})
    warm.judge_many(mixed_documents(150, seed=15))
    assert [warm.judge(d) for d in docs[::5]] == whole[::5]
    assert [r for i in range(0, len(docs), 37) for r in warm.judge_many(docs[i : i + 37])] == whole
    code = (
        "import json, sys; sys.path[:0] = ['tests', '.'];"
        "from support.filter_reference import mixed_documents;"
        "from pipeline.prepare.clean.quality.fast_filters import FastFilters;"
        f"docs = mixed_documents(150, seed=14); f = FastFilters({CHAIN!r}, {{}});"
        "sys.stdout.write(json.dumps("
        "[r for i in range(0, len(docs), 53) for r in f.judge_many(docs[i:i + 53])]))"
    )
    other = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        env=dict(os.environ, PYTHONHASHSEED="12345"),
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    assert json.loads(other) == [list(r) for r in whole]


def test_a_small_cache_starts_afresh_and_decides_the_same(monkeypatch):
    docs = mixed_documents(80, seed=16)
    expected = FastFilters(CHAIN, {}).judge_many(docs)
    monkeypatch.setattr(WordCache, "MAX_CHUNKS", 500)
    assert FastFilters(CHAIN, {}).judge_many(docs) == expected


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # datatrove's np.mean of no words
def test_parameters_the_rules_cannot_use_fail_as_in_the_exact_mode():
    """`min_doc_words=0` lets an empty document reach a division by its word count: both refuse,
    with the same line."""
    params = {"gopher-quality": {"min_doc_words": 0}}
    errors = []
    for impl in ("fast", "datatrove"):
        with pytest.raises(FilterError) as error:
            quality_filters(["gopher-quality"], params, impl).judge_many([""])
        errors.append(str(error.value))
    assert errors[0] == errors[1] and "check its parameters" in errors[0]
    with pytest.raises(FilterError, match="refuse their parameters"):
        check_filters(
            ["gopher-repetition"], {"gopher-repetition": {"dup_n_grams": [[0, 0.1]]}}, "fast"
        )


@pytest.mark.integration
@pytest.mark.parametrize(
    "params",
    [
        {
            "gopher-quality": {
                "min_doc_words": 30,
                "stop_words": ["the", "and", "a", "of", "to", "in"],
                "min_stop_words": 3,
            }
        },
        {
            "gopher-repetition": {
                "top_n_grams": [[2, 0.1], [3, 0.1]],
                "dup_n_grams": [[4, 0.1], [7, 0.05]],
            }
        },
        {"c4": {"split_paragraph": False}, "fineweb": {}},
        {
            "c4": {"min_num_sentences": 3, "min_words_per_line": 5, "remove_citations": False},
            "fineweb": {},
        },
        {
            "fineweb": {
                "stop_chars": ["end.", "!"],
                "line_punct_exclude_zero": True,
                "new_line_ratio": 0.1,
            }
        },
    ],
    ids=lambda p: json.dumps(p)[:50],
)
def test_parameters_change_the_rules_as_datatrove_s(params):
    """`--filter-param` values as prepare passes them (JSON lists included), on a small sample."""
    docs = random.Random(5).sample(mixed_documents(150, seed=17), 100)
    names = list(params)
    assert FastFilters(names, params).judge_many(docs) == quality_filters(
        names, params, "datatrove"
    ).judge_many(docs)


def test_a_lone_surrogate_is_judged_where_datatrove_cannot():
    """spaCy refuses a lone surrogate (a JSON `\\ud800` escape), so the exact mode stops the run;
    the fast filters split such a chunk as if it held U+FFFD."""
    text = "A lone \ud800 surrogate in a sentence of the text. " * 20
    with pytest.raises(FilterError):
        quality_filters(CHAIN, {}, "datatrove").judge_many([text])
    ((reason, kept),) = FastFilters(CHAIN, {}).judge_many([text])
    assert isinstance(kept, str) and (reason is None or reason.startswith("filter:"))


def test_chunks_and_their_hashes():
    found = chunks(["a  b c", "", "\u2028d\xa0e "])
    assert found.strings(np.arange(len(found.hashes))) == ["a", "b", "c", "d", "e"]
    assert found.bounds.tolist() == [0, 3, 3, 5]
    assert found.one_space_after().tolist() == [False, True, False, False, False]
    assert hashes_of(["b", "a"]).tolist() == found.hashes[[1, 0]].tolist()
    assert len(set(hashes_of([str(i) for i in range(10000)]).tolist())) == 10000
    long = "x" * 300
    assert hashes_of([long]).tolist() == chunks([f"y {long} z"]).hashes[1:2].tolist()
    # A text of several hashing windows: the same hash for the same string wherever it is.
    words = [f"w{i % 5000}" for i in range(400_000)]
    big = chunks([" ".join(words)])
    assert [hashes_of([w])[0] for w in words[::39_999]] == big.hashes[::39_999].tolist()
    assert len(set(big.hashes.tolist())) == 5000
