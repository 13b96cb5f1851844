"""datatrove's English words of a batch of texts, as arrays, from a per-process cache of chunks.

datatrove's English `word_tokenize` is spaCy's tokenizer (a blank English pipeline) with the
whitespace tokens dropped: the words of each whitespace chunk (`word_chunks`), in order, and a
chunk's words depend on the chunk alone. So each distinct chunk is split once per process: the
chunks a batch brings that the cache has not seen are joined by single spaces and split by one call
of spaCy's own tokenizer, and its tokens are mapped back to their chunks by their character offsets
(a single space between two chunks is no token). One rule of spaCy's English is known here, for
speed: a chunk of letters alone that is no special case is one word (see `WordCache._words`). What
the filters need of a chunk's words is kept as numpy columns, so a document's word statistics are
gathers and sums over its chunk ids:

- per word (a chunk's token): a 64-bit hash of its characters, its length, and its class for spaCy's
  sentencizer (in its `punct_chars`, punctuation, or neither);
- per chunk: its word count, and for Gopher quality the words with a character outside datatrove's
  PUNCTUATION_SET and their total length, the words with a letter, and which stop words it holds.

Across chunks spaCy's special cases (a table of whole strings, matched again over the tokens of a
text) would need a key holding a space and a non-space character; English has none (checked where
the tokenizer is loaded), so splitting chunks apart is splitting the text.

Lone surrogates (a JSON `\\ud800` escape) make spaCy refuse a text; here a chunk holding one is
split as if it held U+FFFD there. The cache starts afresh past `MAX_CHUNKS` chunks: it changes the
speed, never a decision.
"""

from __future__ import annotations

import functools
import unicodedata
from collections.abc import Iterable

import numpy as np

from pipeline.prepare.clean.quality.spacy_import import import_spacy
from pipeline.prepare.clean.quality.word_chunks import (
    Chunks,
    HashTable,
    code_points,
    hashes_of,
    string_hashes,
    without_surrogates,
)

# A word's class for spaCy's sentencizer: `punct_chars` (ends a sentence), other punctuation, or
# neither (a whitespace token is neither).
OTHER, SENTENCE_END, PUNCTUATION = 0, 1, 2


@functools.cache
def english() -> tuple:
    """spaCy's blank English pipeline as datatrove's `load_word_tokenizer` builds it, and the hashes
    of its sentencizer's `punct_chars`. The filters read no lexeme attributes, so this private copy
    computes none (a third of a new word's cost). Loaded when first needed: importing spaCy takes
    most of a second (see `spacy_import`)."""
    from datatrove.utils.typeshelper import Languages

    nlp = import_spacy().blank(Languages.english)
    sentence_ends = nlp.add_pipe("sentencizer").punct_chars
    nlp.vocab.lex_attr_getters = {}
    spaced = [
        key for key in nlp.tokenizer.rules if any(c.isspace() for c in key) and not key.isspace()
    ]
    if spaced:
        raise RuntimeError(
            f"spaCy's English special cases {spaced} hold a space: chunks cannot be split apart"
        )
    return nlp, np.sort(hashes_of(sorted(sentence_ends)))


class _CharacterClasses:
    """Per code point, filled as characters are met: in PUNCTUATION_SET (1), a letter (2, as
    `str.isalpha`), punctuation (4, Unicode category P*, spaCy's `is_punct`)."""

    _UNKNOWN = 255

    def __init__(self) -> None:
        self._table = np.full(0x110000, self._UNKNOWN, dtype=np.uint8)

    def of(self, points: np.ndarray, punctuation: frozenset[str]) -> np.ndarray:
        found = self._table[points]
        unknown = np.unique(points[found == self._UNKNOWN])
        if len(unknown):
            characters = [chr(c) for c in unknown.tolist()]
            self._table[unknown] = [
                (c in punctuation) | c.isalpha() << 1 | unicodedata.category(c).startswith("P") << 2
                for c in characters
            ]
            found = self._table[points]
        return found


def _grown(array: np.ndarray, n: int) -> np.ndarray:
    if n <= len(array):
        return array
    grown = np.zeros((max(n, 2 * len(array)), *array.shape[1:]), dtype=array.dtype)
    grown[: len(array)] = array
    return grown


def _spans(values: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    """Sums of `values[bounds[i]:bounds[i + 1]]`."""
    total = np.zeros(len(values) + 1, dtype=np.int64)
    np.cumsum(values, out=total[1:])
    return total[bounds[1:]] - total[bounds[:-1]]


class WordCache:
    """Each distinct chunk's words, as arrays (see the module's docstring). `stop_words`: Gopher
    quality's, whose presence is kept per chunk."""

    MAX_CHUNKS = 1_000_000

    def __init__(self, stop_words: Iterable[str] = ()):
        from datatrove.utils.text import PUNCTUATION_SET

        self._punctuation = frozenset(PUNCTUATION_SET)
        stop = sorted(set(stop_words))
        self._stop_hashes = hashes_of(stop)
        self._stop_order = np.argsort(self._stop_hashes)
        self.stop_columns = max(1, -(-len(stop) // 64))
        self._classes = _CharacterClasses()
        self.reset()

    def reset(self) -> None:
        self._table = HashTable()
        self.chunks = self.tokens = 0
        # per chunk
        self.word_count = np.zeros(1024, dtype=np.int64)
        self.first_word = np.zeros(1024, dtype=np.int64)
        self.non_symbol = np.zeros(1024, dtype=np.int64)
        self.non_symbol_length = np.zeros(1024, dtype=np.int64)
        self.alpha = np.zeros(1024, dtype=np.int64)
        self.stop = np.zeros((1024, self.stop_columns), dtype=np.uint64)
        # per word of a chunk
        self.word_hash = np.zeros(1024, dtype=np.uint64)
        self.word_length = np.zeros(1024, dtype=np.int64)
        self.word_class = np.zeros(1024, dtype=np.int8)
        self.one_word_chunks = True  # every chunk so far is one word: a chunk's word is its first

    def __len__(self) -> int:
        return self.chunks

    def ids(self, found: Chunks) -> np.ndarray:
        """The id of each chunk of `found`, splitting those never seen."""
        if self.chunks + len(found.hashes) > self.MAX_CHUNKS and self.chunks:
            self.reset()
        ids = self._table.lookup(found.hashes)
        missing = np.flatnonzero(ids < 0)
        if len(missing):
            new, first = np.unique(found.hashes[missing], return_index=True)
            self._add(found.strings(missing[first]))
            self._table.insert(new, self.chunks - len(new) + np.arange(len(new), dtype=np.int64))
            ids[missing] = self._table.lookup(found.hashes[missing])
        return ids

    def _add(self, strings: list[str]) -> None:
        """Splits the new chunks `strings` and appends their columns, in that order."""
        text = " ".join(strings)
        lengths = np.fromiter(map(len, strings), dtype=np.int64, count=len(strings))
        chunk_starts = np.concatenate(([0], np.cumsum(lengths + 1)[:-1]))
        starts, ends = self._words(strings, chunk_starts)
        chunk_of = np.searchsorted(chunk_starts, starts, side="right") - 1
        counts = np.bincount(chunk_of, minlength=len(strings))
        bounds = np.concatenate(([0], np.cumsum(counts)))

        points = code_points(text)
        hashes = string_hashes(text, points, starts, ends)
        classes = self._classes.of(points, self._punctuation)
        marked = np.zeros((len(points) + 1, 3), dtype=np.int64)
        np.cumsum(
            np.stack([classes & 1, classes >> 1 & 1, classes >> 2 & 1], axis=1),
            axis=0,
            out=marked[1:],
        )
        in_set, letters, punct = (marked[ends] - marked[starts]).T
        word_length = ends - starts
        non_symbol = in_set < word_length  # a character outside PUNCTUATION_SET
        ends_sentence = np.isin(hashes, english()[1])
        word_class = np.where(
            ends_sentence, SENTENCE_END, np.where(punct == word_length, PUNCTUATION, OTHER)
        )

        c0, c1 = self.chunks, self.chunks + len(strings)
        t0, t1 = self.tokens, self.tokens + len(hashes)
        for name in (
            "word_count",
            "first_word",
            "non_symbol",
            "non_symbol_length",
            "alpha",
            "stop",
        ):
            setattr(self, name, _grown(getattr(self, name), c1))
        for name in ("word_hash", "word_length", "word_class"):
            setattr(self, name, _grown(getattr(self, name), t1))
        self.word_count[c0:c1] = counts
        self.first_word[c0:c1] = t0 + bounds[:-1]
        self.non_symbol[c0:c1] = _spans(non_symbol, bounds)
        self.non_symbol_length[c0:c1] = _spans(np.where(non_symbol, word_length, 0), bounds)
        self.alpha[c0:c1] = _spans(letters > 0, bounds)
        self.word_hash[t0:t1] = hashes
        self.word_length[t0:t1] = word_length
        self.word_class[t0:t1] = word_class
        if len(self._stop_hashes):
            at = np.minimum(
                np.searchsorted(self._stop_hashes, hashes, sorter=self._stop_order),
                len(self._stop_hashes) - 1,
            )
            index = self._stop_order[at]
            hit = np.flatnonzero(self._stop_hashes[index] == hashes)
            bits = np.left_shift(np.uint64(1), (index[hit] % 64).astype(np.uint64))
            np.bitwise_or.at(self.stop, (c0 + chunk_of[hit], index[hit] // 64), bits)
        self.one_word_chunks &= bool((counts == 1).all())
        self.chunks, self.tokens = c1, t1

    def _words(self, strings: list[str], chunk_starts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Where the words of chunks `strings` start and end in `" ".join(strings)`, in order.

        A chunk of letters alone that is no special case is one word: each of spaCy's English
        prefix, suffix and infix expressions, and its URL match, needs a character that is not a
        letter (tests/prepare/test_fast_filters.py checks every letter against spaCy). Those
        chunks, half of the new ones in prose, are spared spaCy's call, which costs about ten
        microseconds a chunk; the others are split by one call over them joined by single spaces,
        in a memory zone, so that spaCy's vocabulary does not grow with them."""
        from spacy.attrs import IDX, LENGTH

        nlp = english()[0]
        rules = nlp.tokenizer.rules
        split = [i for i, s in enumerate(strings) if not s.isalpha() or s in rules]
        one_word = np.ones(len(strings), dtype=bool)
        one_word[split] = False
        starts, ends = (
            chunk_starts[one_word],
            chunk_starts[one_word]
            + np.array(
                [len(s) for s, alone in zip(strings, one_word.tolist()) if alone], dtype=np.int64
            ),
        )
        if split:
            sent = [strings[i] for i in split]
            sent_starts = np.concatenate(
                ([0], np.cumsum(np.array([len(s) + 1 for s in sent], dtype=np.int64))[:-1])
            )
            with nlp.memory_zone():
                doc = nlp.tokenizer(without_surrogates(" ".join(sent)))
                spans = doc.to_array([IDX, LENGTH]).astype(np.int64).reshape(-1, 2)
            of = np.searchsorted(sent_starts, spans[:, 0], side="right") - 1
            moved = (
                spans[:, 0] - sent_starts[of] + chunk_starts[np.array(split, dtype=np.int64)[of]]
            )
            starts, ends = (
                np.concatenate((starts, moved)),
                np.concatenate((ends, moved + spans[:, 1])),
            )
            order = np.argsort(starts, kind="stable")
            starts, ends = starts[order], ends[order]
        return starts, ends

    def word_positions(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Where the words of chunks `ids` are, in order, in the word columns, and the chunks' word
        counts."""
        counts = self.word_count[ids]
        first = self.first_word[ids]
        if self.one_word_chunks:
            return first, counts
        ends = np.cumsum(counts)
        return np.repeat(first - (ends - counts), counts) + np.arange(
            ends[-1] if len(ends) else 0
        ), counts


_POPCOUNT = np.array([bin(i).count("1") for i in range(256)], dtype=np.int64)


class Words:
    """The words of some texts (`ids`: the cache's ids of their chunks, `bounds` per text)."""

    def __init__(self, cache: WordCache, ids: np.ndarray, bounds: np.ndarray):
        self.cache, self.ids, self.bounds = cache, ids, bounds
        self.counts = _spans(cache.word_count[ids], bounds)
        self._sequences: tuple | None = None

    def subset(self, rows: np.ndarray) -> Words:
        """The words of texts `rows` alone, in that order."""
        if len(rows) == len(self.counts) and (rows == np.arange(len(rows))).all():
            return self
        sizes = np.diff(self.bounds)[rows]
        bounds = np.concatenate(([0], np.cumsum(sizes)))
        at = np.repeat(self.bounds[:-1][rows] - bounds[:-1], sizes) + np.arange(bounds[-1])
        return Words(self.cache, self.ids[at], bounds)

    def gopher(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Per text: words with a character outside PUNCTUATION_SET, their total length, words with
        a letter, distinct stop words."""
        cache, ids, bounds = self.cache, self.ids, self.bounds
        stop = np.zeros((len(bounds) - 1, cache.stop_columns), dtype=np.uint64)
        held = np.flatnonzero(bounds[1:] > bounds[:-1])
        if len(held):
            stop[held] = np.bitwise_or.reduceat(cache.stop[ids], bounds[:-1][held], axis=0)
        stop_words = _POPCOUNT[stop.view(np.uint8)].sum(axis=1)
        return (
            _spans(cache.non_symbol[ids], bounds),
            _spans(cache.non_symbol_length[ids], bounds),
            _spans(cache.alpha[ids], bounds),
            stop_words,
        )

    def sequences(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every text's words in order, as hashes and lengths, and the bounds of each text's."""
        if self._sequences is None:
            positions, _ = self.cache.word_positions(self.ids)
            word_bounds = np.concatenate(([0], np.cumsum(self.counts)))
            self._sequences = (
                self.cache.word_hash[positions],
                self.cache.word_length[positions],
                word_bounds,
            )
        return self._sequences
