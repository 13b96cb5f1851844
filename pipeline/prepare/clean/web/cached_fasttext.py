"""fastText's label probabilities for a batch of texts, from a per-process cache of each distinct
word's input rows.

fastText's prediction of a line averages the input rows of its words' ids (a word's own id, if
the dictionary has it, and the buckets of its character n-grams, `<word>` cut into 2 to 4 code
points for lid.176) and puts that average through the output layer. A word's ids depend on the word
alone, so each distinct word's rows are summed once per process, and a text's average is a gather
and a sum over its words (`word_chunks` finds and hashes them, with fastText's whitespace). fastText
itself hashes every n-gram of every word of every line: this is three to four times its speed on
web text from a cold cache, the more the more words repeat.

The rules are fastText's (`Dictionary::getLine`, `computeSubwords`, `pushHash`; the hierarchical
softmax's tree and `std_log`; the softmax), read from its source. Sums are in float64 where fastText
adds float32 rows one at a time, so a probability differs from fastText's by fastText's rounding
(up to 4e-5 of it on a long web text) and a decision only where a score is that close to its
threshold. Models
whose prediction this does not cover (word n-grams, one-vs-all or negative-sampling losses) are left
to fastText's own engine (see `supported`).

A text is as datatrove gives it to fastText, its newlines spaces; a lone surrogate, which fastText's
binding refuses, is scored as U+FFFD. The cache starts afresh once its sums would pass `MAX_BYTES`:
it changes the speed, never a score.
"""

from __future__ import annotations

import numpy as np

from pipeline.prepare.clean.quality.word_chunks import (
    Chunks,
    HashTable,
    chunks,
    without_surrogates,
)
from pipeline.prepare.clean.web.fasttext_file import (
    HIERARCHICAL_SOFTMAX,
    SOFTMAX,
    SUPERVISED,
    FastTextFile,
)

END_OF_LINE = "</s>"  # the token fastText reads at a newline, and that ends a line
_LABEL = "__label__"
# fastText's word separators (`Dictionary::readWord`); every other code point is part of a word.
_SEPARATORS = " \n\r\t\v\f\0"
_WORD_CHARACTER = np.array([chr(c) not in _SEPARATORS for c in range(33)] + [True], dtype=bool)
_FNV_OFFSET, _FNV_PRIME = 2166136261, 16777619
_UTF8_BYTES = 4  # the most bytes one code point takes
_LOG_FLOOR = 1e-5  # fastText's `std_log(x)` is log(x + 1e-5)


def supported(model: FastTextFile) -> str | None:
    """Why this engine cannot predict as fastText does for `model`, or None if it can."""
    if model.model != SUPERVISED:
        return "not a classifier"
    if model.loss not in (HIERARCHICAL_SOFTMAX, SOFTMAX):
        return "its loss is neither the hierarchical softmax nor the softmax"
    if model.word_ngrams > 1:
        return "it reads word n-grams"
    return None


class CachedClassifier:
    """A classifier's probabilities for every label, texts a batch at a time (see the module's
    docstring)."""

    MAX_BYTES = 1 << 27  # the cached words' sums: a million words of lid.176's 16 dimensions

    def __init__(self, model: FastTextFile):
        reason = supported(model)
        if reason is not None:
            raise ValueError(f"the cached engine cannot predict with this model: {reason}")
        self._model = model
        self.labels = [label.removeprefix(_LABEL) for label in model.labels]
        inner = len(model.labels) - 1 if model.loss == HIERARCHICAL_SOFTMAX else len(model.labels)
        self._output = np.asarray(model.output_rows[:inner], dtype=np.float64)
        if model.loss == HIERARCHICAL_SOFTMAX:
            self._paths = _tree_paths(model.label_counts)
        self._reset()

    def _reset(self) -> None:
        self._table = HashTable()
        # Per cached word, one column: its rows' sum (gathered and summed along rows, which is
        # several times faster than the transposed layout) and their count.
        self._sums = np.zeros((self._model.dim, 1024), dtype=np.float64)
        self._counts = np.zeros(1024, dtype=np.int64)
        self._cached = 0
        self._end = self._ids(chunks([END_OF_LINE], _WORD_CHARACTER))[0]

    def probabilities(self, texts: list[str]) -> np.ndarray:
        """Per text (newlines read as spaces), every label's probability as fastText's `predict`
        with `k=-1` gives it (those it prunes for falling below 1e-5 too); all 0 for a text
        fastText gives no prediction (no word with a row, where END_OF_LINE has none)."""
        if not texts:
            return np.zeros((0, len(self.labels)))
        found = chunks(texts, _WORD_CHARACTER)
        ids, bounds = self._lines(self._ids(found), found.bounds)
        sums = np.add.reduceat(np.take(self._sums, ids, axis=1), bounds[:-1], axis=1).T
        totals = np.add.reduceat(self._counts[ids], bounds[:-1])
        with np.errstate(invalid="ignore", divide="ignore"):
            probabilities = self._output_layer(sums / totals[:, None])
        probabilities[totals == 0] = 0.0
        return probabilities

    def _lines(self, ids: np.ndarray, bounds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Each text's words as fastText reads its line: up to its first END_OF_LINE, or with the
        END_OF_LINE of the newline fastText's binding appends."""
        lengths = np.diff(bounds)
        ended = np.flatnonzero(ids == self._end)
        texts, first = np.unique(
            np.searchsorted(bounds, ended, side="right") - 1, return_index=True
        )
        read = np.ones(len(ids), dtype=bool)
        for text, at in zip(texts.tolist(), ended[first].tolist()):
            read[at + 1 : bounds[text + 1]] = False
            lengths[text] = at + 1 - bounds[text]
        unended = np.ones(len(lengths), dtype=bool)
        unended[texts] = False
        ids = np.insert(ids[read], np.cumsum(lengths)[unended], self._end)
        lengths += unended
        return ids, np.concatenate(([0], np.cumsum(lengths)))

    def _output_layer(self, hidden: np.ndarray) -> np.ndarray:
        """Each text's probabilities from its hidden vector alone: a matrix product's or a
        reduction's rounding may depend on the rows beside it, so each text has its own
        matrix-vector product and sums, and a path's steps are added in order."""
        output = self._output
        logits = np.stack([output @ row for row in hidden])
        if self._model.loss == SOFTMAX:
            exp = np.exp(logits - logits.max(axis=1, keepdims=True))
            totals = np.array([row.sum() for row in exp])
            return np.exp(np.log(exp / totals[:, None] + _LOG_FLOOR))
        branch = 1 / (1 + np.exp(-logits))
        # Each inner node's two branches' log-probabilities, then a zero for the paths' padding.
        steps = np.concatenate(
            (np.log(1 - branch + _LOG_FLOOR), np.log(branch + _LOG_FLOOR), hidden[:, :1] * 0),
            axis=1,
        )
        scores = np.zeros((len(hidden), len(self.labels)))
        for depth in range(self._paths.shape[1]):
            scores += steps[:, self._paths[:, depth]]
        return np.exp(scores)

    def _ids(self, found: Chunks) -> np.ndarray:
        """The cache's id of each word of `found`, its rows summed first if it is new."""
        if (self._cached + len(found.hashes)) * self._model.dim * 8 > self.MAX_BYTES:
            self._reset()
        ids = self._table.lookup(found.hashes)
        missing = np.flatnonzero(ids < 0)
        if len(missing):
            new, first = np.unique(found.hashes[missing], return_index=True)
            words = found.strings(missing[first])
            start = self._cached
            self._add(words)
            self._table.insert(new, start + np.arange(len(new), dtype=np.int64))
            ids[missing] = self._table.lookup(found.hashes[missing])
        return ids

    def _add(self, words: list[str]) -> None:
        model = self._model
        end = self._cached + len(words)
        if end > len(self._counts):
            more = max(end, 2 * len(self._counts)) - len(self._counts)
            self._sums = np.concatenate((self._sums, np.zeros((model.dim, more))), axis=1)
            self._counts = np.concatenate((self._counts, np.zeros(more, dtype=np.int64)))
        owners, rows = _input_rows(model, words)
        order = np.argsort(owners, kind="stable")
        counts = np.bincount(owners, minlength=len(words))
        held = np.flatnonzero(counts)  # a word of no rows (a label) keeps zeros
        columns = np.ascontiguousarray(model.input_rows[rows[order]].T, dtype=np.float64)
        starts = np.concatenate(([0], np.cumsum(counts)[:-1]))[held]
        self._sums[:, self._cached + held] = np.add.reduceat(columns, starts, axis=1)
        self._counts[self._cached : end] = counts
        self._cached = end


def _input_rows(model: FastTextFile, words: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """The input rows of each word (`Dictionary::getLine`): its own, if the dictionary has it as a
    word, then its n-grams' buckets', END_OF_LINE's own alone, and none for a label; as the index of
    the word each row is for, and the rows."""
    words = [without_surrogates(word) for word in words]
    owners, rows, subworded = [], [], []
    for i, word in enumerate(words):
        own = model.words.get(word, -1)
        if own >= 0:
            owners.append(i)
            rows.append(own)
        if word == END_OF_LINE or (own < 0 and word.startswith(_LABEL)):
            continue
        subworded.append(i)
    grams, rows_of_grams = _ngram_buckets(model, [words[i] for i in subworded])
    if model.bucket_rows is not None:
        rows_of_grams = model.bucket_rows[rows_of_grams]
        grams, rows_of_grams = grams[rows_of_grams >= 0], rows_of_grams[rows_of_grams >= 0]
    owners_array = np.concatenate(
        [np.array(owners, dtype=np.int64), np.array(subworded, dtype=np.int64)[grams]]
    )
    rows_array = np.concatenate([np.array(rows, dtype=np.int64), len(model.words) + rows_of_grams])
    return owners_array, rows_array


def _ngram_buckets(model: FastTextFile, words: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """`computeSubwords` of each `<word>`, all at once: the index of the word each n-gram is of,
    and its bucket (fastText's FNV-1a of its UTF-8 bytes, each byte sign-extended, modulo
    `bucket`)."""
    if not words:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    encoded = [b"<" + word.encode("utf-8") + b">" for word in words]
    data = np.frombuffer(b"".join(encoded), dtype=np.uint8)
    lengths = np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded))
    starts = np.flatnonzero((data & 0xC0) != 0x80)  # each code point's first byte
    word_of = np.repeat(np.arange(len(words)), lengths)[starts]
    widths = np.diff(np.append(starts, len(data)))
    signed = data.astype(np.uint64)
    signed[data >= 0x80] |= np.uint64(0xFFFFFF00)
    first = np.zeros(len(starts), dtype=bool)  # `<`, and `>` below
    first[np.searchsorted(starts, np.concatenate(([0], np.cumsum(lengths)[:-1])))] = True
    last = np.append(first[1:], True)
    alive = np.arange(len(starts))  # the n-grams of n code points, by their first
    hashes = np.full(len(starts), _FNV_OFFSET, dtype=np.uint64)
    owners, buckets = [], []
    for n in range(1, model.maxn + 1):
        end = alive + n - 1  # their last code point
        whole = end < len(starts)
        whole[whole] = word_of[end[whole]] == word_of[alive[whole]]
        alive, end, hashes = alive[whole], end[whole], hashes[whole]
        for byte in range(_UTF8_BYTES):
            more = np.flatnonzero(widths[end] > byte)
            if not len(more):
                break
            mixed = hashes[more] ^ signed[starts[end[more]] + byte]
            hashes[more] = (mixed * np.uint64(_FNV_PRIME)) & np.uint64(0xFFFFFFFF)
        if n >= model.minn:
            emitted = ~(first[alive] | last[alive]) if n == 1 else slice(None)
            owners.append(word_of[alive[emitted]])
            buckets.append((hashes[emitted] % np.uint64(model.bucket)).astype(np.int64))
    return np.concatenate(owners), np.concatenate(buckets)


def _tree_paths(counts: list[int]) -> np.ndarray:
    """The hierarchical softmax's Huffman tree as fastText builds it from the label counts
    (`HierarchicalSoftmaxLoss::buildTree`): per label, the steps from the root, each an inner
    node's left branch (its index) or right branch (the inner nodes' count plus its index), padded
    with twice that count (a zero step)."""
    labels = len(counts)
    inner = labels - 1
    count = list(counts) + [10**15] * inner
    parent = [-1] * (labels + inner)
    right_child = [False] * (labels + inner)
    leaf, node = labels - 1, labels
    for joined in range(labels, labels + inner):
        pair = []
        for _ in range(2):
            if leaf >= 0 and count[leaf] < count[node]:
                pair.append(leaf)
                leaf -= 1
            else:
                pair.append(node)
                node += 1
        count[joined] = count[pair[0]] + count[pair[1]]
        parent[pair[0]] = parent[pair[1]] = joined
        right_child[pair[1]] = True
    paths = []
    for label in range(labels):
        steps, child = [], label
        while parent[child] != -1:
            steps.append(parent[child] - labels + inner * right_child[child])
            child = parent[child]
        paths.append(steps[::-1])
    depth = max(map(len, paths), default=0)
    return np.array([steps + [2 * inner] * (depth - len(steps)) for steps in paths], dtype=np.int64)
