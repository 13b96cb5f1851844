"""The fast filters against datatrove's own: the same parameters, the same words and sentences as
datatrove's spaCy split, the same decisions whatever the process, the batches or the cache, and
the same errors for parameters the rules cannot use. The agreement over thousands of documents is
tests/test_filter_agreement.py's (slow)."""

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

from pipeline.prepare.clean import c4_quality, gopher_quality
from pipeline.prepare.clean.c4_quality import sentence_counts
from pipeline.prepare.clean.datatrove_filters import class_parameters
from pipeline.prepare.clean.fast_filters import FastFilters
from pipeline.prepare.clean.quality_filters import FilterError, check_filters, parameters, quality_filters
from pipeline.prepare.clean.word_cache import WordCache, Words, english
from pipeline.prepare.clean.word_chunks import chunks, hashes_of
from schemas.prepare_config import FILTER_NAMES
from varied_text import varied_documents
from web_text import held_out_documents

CHAIN = list(FILTER_NAMES)
ODD = [
    "", " ", "\n", "\n\n\n", "\t", "\xa0", "\u2028", "\u3000", "ok", "#", "...", "…", "{}", "—", "-", "•",
    "A\u2028B\u2029C\x85D\x0bE\x0cF\x1cG\r\nH\rI", "word\xa0word\tword  word\u3000word.",
    "Don't stop. It's fine! I'm here? We're done.", "e.g. this. U.S. is big.  Really?! Yes.\tNo. Mr. Smith (see above).",
    "Hi.\tThere. Wait...  what?! Yes.\xa0No. A. B. C. dont gonna cannot :) <3 10km $20 C++ e-mail x86_64.",
    "https://www.example.com/a?b=c#d someone@example.com 10:30am 3.5% ½ № °C 'quoted' \"double\" «guillemets»",
]


def _documents(count: int, seed: int) -> list[str]:
    return varied_documents(seed, count) + held_out_documents(seed=seed, count=60) + ODD


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
    assert (c4_quality.END_PUNCTUATION, c4_quality.ELLIPSIS) == (c4_filters.END_PUNCTUATION, c4_filters.ELLIPSIS)
    assert list(c4_quality.POLICY_SUBSTRINGS) == c4_filters.POLICY_SUBSTRINGS
    assert list(gopher_quality.STOP_WORDS) == gopher_quality_filter.STOP_WORDS


def test_the_launcher_checks_the_fast_rules_without_spacy():
    """Checking the parameters before a run imports neither spaCy nor datatrove's filters (most of a
    second), yet refuses what the rules cannot use, as judging would."""
    code = (
        "import sys; from pipeline.prepare.clean.quality_filters import check_filters, FilterError;"
        "check_filters(['gopher-quality', 'gopher-repetition', 'c4', 'fineweb'], {'c4': {'split_paragraph': False}}, 'fast');"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'spacy' or m.startswith('datatrove.pipeline')))"
    )
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    done = subprocess.run([sys.executable, "-c", code], cwd=repo, check=True, capture_output=True, text=True)
    assert done.stdout.strip() == "[]"
    for params in ({"gopher-quality": {"stop_words": 5}}, {"gopher-quality": {"min_doc_words": "many"}},
                   {"c4": {"min_num_sentences": "five"}}, {"fineweb": {"short_line_length": "x"}},
                   {"gopher-repetition": {"top_n_grams": [[2, "x"]]}}):
        for impl in ("fast", "datatrove"):
            with pytest.raises(FilterError):
                check_filters(list(params), params, impl)


def test_words_are_datatrove_s_spacy_words():
    """Per document, the words (as hashes and lengths) are datatrove's English `word_tokenize`."""
    docs = [d for d in _documents(300, seed=11) if len(d) < 100_000]
    cache = WordCache()
    found = chunks(docs)
    hashes, lengths, bounds = Words(cache, cache.ids(found), found.bounds).sequences()
    spacy_words = load_word_tokenizer("en")
    for i, doc in enumerate(docs):
        expected = spacy_words.word_tokenize(doc)
        assert hashes[bounds[i]:bounds[i + 1]].tolist() == hashes_of(expected).tolist(), doc[:200]
        assert lengths[bounds[i]:bounds[i + 1]].tolist() == [len(w) for w in expected]


def test_sentence_counts_are_spacy_s():
    """What C4 counts per kept line: datatrove's `split_into_sentences`, whitespace tokens included."""
    lines = [line.strip() for d in _documents(200, seed=12) for line in d.splitlines() if line.strip()][:3000]
    lines += ["Hi.  There", "Hi.\tThere", "Hi. There ", "Hi.  ", "Hi.\t", "Hi.\xa0", " Hi. there", "A. B. C.",
              "Wait... what?! Yes.", "x.\xa0y", "Hello [1]. World ", "。Done！Next？", "(Yes.) (No.) Maybe"]
    assert sentence_counts(WordCache(), lines).tolist() == [len(split_into_sentences(line)) for line in lines]


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


def test_the_chain_decides_as_datatrove_on_a_sample():
    """A quick look at what tests/test_filter_agreement.py measures: the chain's reasons and kept texts."""
    docs = _documents(120, seed=13)
    assert FastFilters(CHAIN, {}).judge_many(docs) == quality_filters(CHAIN, {}, "datatrove").judge_many(docs)


def test_decisions_do_not_depend_on_batches_cache_or_process():
    """Decisions use content-derived hashes only: one document at a time, other batches, a warm
    cache or a cold one in another process with another PYTHONHASHSEED give the same results."""
    docs = _documents(150, seed=14)
    whole = FastFilters(CHAIN, {}).judge_many(docs)
    warm = FastFilters(CHAIN, {})
    warm.judge_many(_documents(150, seed=15))
    assert [warm.judge(d) for d in docs[::5]] == whole[::5]
    assert [r for i in range(0, len(docs), 37) for r in warm.judge_many(docs[i:i + 37])] == whole
    code = (
        "import json, sys; sys.path[:0] = ['tests', '.'];"
        "from test_fast_filters import _documents, CHAIN; from pipeline.prepare.clean.fast_filters import FastFilters;"
        "docs = _documents(150, seed=14); f = FastFilters(CHAIN, {});"
        "sys.stdout.write(json.dumps([r for i in range(0, len(docs), 53) for r in f.judge_many(docs[i:i + 53])]))"
    )
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    other = subprocess.run([sys.executable, "-c", code], cwd=repo, env=dict(os.environ, PYTHONHASHSEED="12345"),
                           check=True, capture_output=True, text=True).stdout
    assert json.loads(other) == [list(r) for r in whole]


def test_a_small_cache_starts_afresh_and_decides_the_same(monkeypatch):
    docs = _documents(80, seed=16)
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
        check_filters(["gopher-repetition"], {"gopher-repetition": {"dup_n_grams": [[0, 0.1]]}}, "fast")


@pytest.mark.parametrize("params", [
    {"gopher-quality": {"min_doc_words": 30, "stop_words": ["the", "and", "a", "of", "to", "in"], "min_stop_words": 3}},
    {"gopher-repetition": {"top_n_grams": [[2, 0.1], [3, 0.1]], "dup_n_grams": [[4, 0.1], [7, 0.05]]}},
    {"c4": {"split_paragraph": False}, "fineweb": {}},
    {"c4": {"min_num_sentences": 3, "min_words_per_line": 5, "remove_citations": False}, "fineweb": {}},
    {"fineweb": {"stop_chars": ["end.", "!"], "line_punct_exclude_zero": True, "new_line_ratio": 0.1}},
], ids=lambda p: json.dumps(p)[:50])
def test_parameters_change_the_rules_as_datatrove_s(params):
    """`--filter-param` values as prepare passes them (JSON lists included), on a small sample."""
    docs = random.Random(5).sample(_documents(150, seed=17), 100)
    names = list(params)
    assert FastFilters(names, params).judge_many(docs) == quality_filters(names, params, "datatrove").judge_many(docs)


def test_a_lone_surrogate_is_judged_where_datatrove_cannot():
    """spaCy refuses a lone surrogate (a JSON `\\ud800` escape), so the exact mode stops the run;
    the fast filters split such a chunk as if it held U+FFFD."""
    text = "A lone \ud800 surrogate in a sentence of the text. " * 20
    with pytest.raises(FilterError):
        quality_filters(CHAIN, {}, "datatrove").judge_many([text])
    (reason, kept), = FastFilters(CHAIN, {}).judge_many([text])
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
