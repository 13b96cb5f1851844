"""Gopher repetition's rules (datatrove's `GopherRepetitionFilter`), judged over a batch of texts.

Duplicated lines and paragraphs are counted as datatrove counts them, with sets of strings. The
n-gram rules count word n-grams as hashes: a rolling polynomial of the words' hashes (see
`word_cache`), salted per text so that a batch's texts never share one, and most texts are settled
by an upper bound computed for the whole batch at once:

- the most common n-gram occurs at most as often as each of its bigrams (words for n = 1), and at
  most as often as the bucket it hashes into in a table shared by the batch (`np.bincount`);
- the greedy count of duplicated n-grams (any n at least the smallest asked for, n0) covers only
  words covered by n0-grams met earlier in the text.

Only where a bound passes the threshold is the exact value computed: one `np.unique` over the
n-grams of all such texts gives each its most common n-gram (the first met of ties, as
`Counter.most_common`), and datatrove's greedy walk runs over the positions whose n-gram repeats
(the others never count and always advance by one, so skipping them changes nothing).

One difference, by design: datatrove compares duplicated n-grams by their words joined without
spaces, so `["ab", "c"]` equals `["a", "bc"]`; here two n-grams are equal when their words are.
"""

from __future__ import annotations

import dataclasses
import re

import numpy as np

from pipeline.prepare.clean.quality.word_cache import Words

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)  # the n-gram polynomial's base (odd)
_MIX = np.uint64(0xD6E8FEB86659FD93)  # multiply-shift bucket hash (odd)
_SALT = np.uint64(0xA0761D6478BD642F)  # tells a batch's texts apart
_PARAGRAPHS = re.compile(r"\n{2,}")
# The bucket tables' size: four slots a word, up to 4M (a larger table only tightens the bounds).
_MOST_BITS = 22


def _lines(text: str) -> list[str]:
    """`re.split("\\n+", text)`, with `str.split`."""
    parts = text.split("\n")
    if len(parts) < 3 or "\n\n" not in text:
        return parts
    return [parts[0], *filter(None, parts[1:-1]), parts[-1]]


def _duplicates(items: list[str]) -> tuple[int, int]:
    """datatrove's `find_duplicates`: repeated items, and their characters."""
    distinct = set(items)
    return len(items) - len(distinct), sum(map(len, items)) - sum(map(len, distinct))


def _exclusive_cumsum(values: np.ndarray) -> np.ndarray:
    out = np.zeros(len(values) + 1, dtype=np.int64)
    np.cumsum(values, out=out[1:])
    return out


class _Windows:
    """The hash of each n-word window of a word hash array, made once per n."""

    def __init__(self, hashes: np.ndarray):
        self._by_n = {1: hashes}

    def get(self, n: int) -> np.ndarray:
        if n not in self._by_n:
            k = max(j for j in self._by_n if j < n)
            windows, words = self._by_n[k], self._by_n[1]
            with np.errstate(over="ignore"):
                for j in range(k + 1, n + 1):
                    windows = windows[:-1] * _GOLDEN + words[j - 1 :]
                    self._by_n[j] = windows
        return self._by_n[n]


def _duplicated_characters(hashes: np.ndarray, lengths: np.ndarray, n: int) -> int:
    """datatrove's `find_all_duplicate(words, n)`: a greedy walk that counts an n-gram met before
    and jumps past it, over only the positions whose n-gram occurs more than once."""
    if len(hashes) < n:
        return 0
    _, inverse, counts = np.unique(_Windows(hashes).get(n), return_inverse=True, return_counts=True)
    repeated = np.flatnonzero(counts[inverse] >= 2)
    if not len(repeated):
        return 0
    total_length = _exclusive_cumsum(lengths)
    seen: set[int] = set()
    after = total = 0
    for at, key, length in zip(
        repeated.tolist(),
        inverse[repeated].tolist(),
        (total_length[repeated + n] - total_length[repeated]).tolist(),
    ):
        if at < after:
            continue
        if key in seen:
            total += length
            after = at + n
        else:
            seen.add(key)
            after = at + 1
    return total


def _segment_max(values: np.ndarray, bounds: np.ndarray, empty: int) -> np.ndarray:
    out = np.full(len(bounds) - 1, empty, dtype=values.dtype)
    held = np.flatnonzero(bounds[1:] > bounds[:-1])
    if len(held):
        out[held] = np.maximum.reduceat(values, bounds[:-1][held])
    return out


@dataclasses.dataclass(frozen=True)
class GopherRepetition:
    """datatrove's keyword arguments and defaults."""

    dup_line_frac: float | None = 0.3
    dup_para_frac: float | None = 0.3
    dup_line_char_frac: float | None = 0.2
    dup_para_char_frac: float | None = 0.2
    top_n_grams: tuple[tuple[int, float]] = ((2, 0.2), (3, 0.18), (4, 0.16))
    dup_n_grams: tuple[tuple[int, float]] = (
        (5, 0.15),
        (6, 0.14),
        (7, 0.13),
        (8, 0.12),
        (9, 0.11),
        (10, 0.10),
    )

    needs_words = True
    web = False

    def __post_init__(self) -> None:
        if any(int(n) < 1 for n, _ in (*self.top_n_grams, *self.dup_n_grams)):
            raise ValueError(
                f"n-grams have at least one word (got {self.top_n_grams=}, {self.dup_n_grams=})"
            )

    def check(self, text: str) -> None:
        """Runs every rule on a check document's lines and on a ratio: what the parameters cannot
        do raises."""
        self._lines_reason(text)
        for n, frac in (*self.top_n_grams, *self.dup_n_grams):
            _ = int(n), 0.5 > frac

    def judge(self, texts: list[str], words: Words) -> list[str | None]:
        """Each text's reason for removal, or None."""
        reasons: list[str | None] = [self._lines_reason(text) for text in texts]
        pending = [i for i, reason in enumerate(reasons) if reason is None]
        if pending and (self.top_n_grams or self.dup_n_grams):
            found = self._ngram_reasons(
                [texts[i] for i in pending], words.subset(np.array(pending, dtype=np.int64))
            )
            for i, reason in zip(pending, found):
                reasons[i] = reason
        return reasons

    def _lines_reason(self, text: str) -> str | None:
        if not text:
            return "empty"
        stripped = text.strip()
        paragraphs = _PARAGRAPHS.split(stripped) if "\n\n" in stripped else [stripped]
        repeated, characters = _duplicates(paragraphs)
        if self.dup_para_frac and repeated / len(paragraphs) > self.dup_para_frac:
            return "dup_para_frac"
        if self.dup_para_char_frac and characters / len(text) > self.dup_para_char_frac:
            return "dup_para_char_frac"
        lines = _lines(text)
        repeated, characters = _duplicates(lines)
        if self.dup_line_frac and repeated / len(lines) > self.dup_line_frac:
            return "dup_line_frac"
        if self.dup_line_char_frac and characters / len(text) > self.dup_line_char_frac:
            return "dup_line_char_frac"
        return None

    def _ngram_reasons(self, texts: list[str], words: Words) -> list[str | None]:
        hashes, lengths, bounds = words.sequences()
        count = len(texts)
        total = len(hashes)
        text_length = np.array([len(t) for t in texts], dtype=np.float64)
        text_of = np.repeat(np.arange(count, dtype=np.int64), np.diff(bounds))
        with np.errstate(over="ignore"):
            salt = (text_of.astype(np.uint64) + np.uint64(1)) * _SALT
        bits = min(max(10, int(np.ceil(np.log2(max(4 * total, 2))))), _MOST_BITS)
        shift, size = np.uint64(64 - bits), 1 << bits
        left = np.repeat(bounds[1:], np.diff(bounds)) - np.arange(
            total, dtype=np.int64
        )  # words to the text's end
        length_before = _exclusive_cumsum(lengths)
        windows = _Windows(hashes)

        def buckets(keys: np.ndarray) -> np.ndarray:
            with np.errstate(over="ignore"):
                return ((keys * _MIX) >> shift).astype(np.int64)

        def salted(n: int, at: np.ndarray | slice) -> np.ndarray:
            with np.errstate(over="ignore"):
                return windows.get(n)[at] + salt[at]

        reasons: list[str | None] = [None] * count
        failed = np.zeros(count, dtype=bool)
        # The most common n-gram's characters (its joined words) times its count, for each n in
        # order.
        top = [(int(n), frac) for n, frac in self.top_n_grams]
        bucket_counts = {}
        for k in sorted({min(n, 2) for n, _ in top}):
            if total - k + 1 > 0:
                b = buckets(salted(k, slice(0, total - k + 1)))
                bucket_counts[k] = np.bincount(b, minlength=size)[b]
        for n, frac in top:
            m = total - n + 1
            if m <= 0:
                continue  # no text has an n-gram: datatrove skips this n
            k = min(n, 2)
            at_most = bucket_counts[k][:m]
            for j in range(1, n - k + 1):
                at_most = np.minimum(at_most, bucket_counts[k][j : j + m])
            inside = left[:m] >= n
            joined = length_before[n : n + m] - length_before[:m] + (n - 1)
            bound = _segment_max(np.where(inside, at_most * joined, -1), np.minimum(bounds, m), -1)
            need = (bound >= 0) & (bound / text_length > frac) & ~failed  # bound < 0: no n-gram
            if not need.any():
                continue
            chosen = np.flatnonzero(inside & need[text_of[:m]])
            _, inverse, occurrences = np.unique(
                salted(n, chosen), return_inverse=True, return_counts=True
            )
            occurs = occurrences[inverse]
            owner = text_of[chosen]
            starts = np.flatnonzero(np.r_[True, owner[1:] != owner[:-1]])
            most = np.maximum.reduceat(occurs, starts)
            best = np.flatnonzero(occurs == np.repeat(most, np.diff(np.r_[starts, len(chosen)])))
            first_best = best[np.r_[True, owner[best][1:] != owner[best][:-1]]]
            owners = owner[starts]
            value = joined[chosen[first_best]] * most
            for i in owners[value / text_length[owners] > frac].tolist():
                failed[i] = True
                reasons[i] = f"top_{n}_gram"
        # Duplicated n-grams: bounded by the characters of words covered by n0-grams met earlier.
        duplicated = [(int(n), frac) for n, frac in self.dup_n_grams]
        covered_length = np.zeros(count)
        if duplicated and total:
            n0 = min(n for n, _ in duplicated)
            m = total - n0 + 1
            if m > 0:
                keys = salted(n0, slice(0, m))
                b = buckets(keys)
                candidates = np.flatnonzero(
                    (np.bincount(b, minlength=size)[b] >= 2) & (left[:m] >= n0)
                )
                if len(candidates):
                    _, first, inverse = np.unique(
                        keys[candidates], return_index=True, return_inverse=True
                    )
                    candidates = candidates[
                        first[inverse] != np.arange(len(candidates))
                    ]  # met earlier
                if len(candidates):
                    starting = _exclusive_cumsum(np.bincount(candidates, minlength=m))
                    j = np.arange(total, dtype=np.int64)
                    covered = (
                        starting[np.minimum(j + 1, m)] - starting[np.clip(j - n0 + 1, 0, m)] > 0
                    )
                    covered_length = np.diff(
                        _exclusive_cumsum(np.where(covered, lengths, 0))[bounds]
                    ).astype(np.float64)
        over = [
            (n, frac, (covered_length / text_length > frac) & ~failed) for n, frac in duplicated
        ]
        suspects = np.flatnonzero(np.any([o for _, _, o in over], axis=0)) if over else []
        for i in suspects:
            a, z = bounds[i], bounds[i + 1]
            for n, frac, o in over:
                if (
                    o[i]
                    and _duplicated_characters(hashes[a:z], lengths[a:z], n) / text_length[i] > frac
                ):
                    reasons[i] = f"duplicated_{n}_n_grams"
                    break
        return reasons
