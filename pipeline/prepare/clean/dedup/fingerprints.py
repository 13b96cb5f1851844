"""What the cleaning stage knows of a document: an exact-text hash, MinHash band keys, and whether
it shares a word n-gram with an eval example.

Exact duplicates are documents equal after `normalized`: Unicode NFC, every run of whitespace one
space, none at either end; case is kept. Near duplicates and eval matches compare words: runs of
Unicode word characters (`\\w+`) of the NFC, case-folded text, so punctuation and case do not hide a
match. Every hash is a fixed function (BLAKE2b, xxh3, SplitMix64), the same on every machine.
"""

from __future__ import annotations

import functools
import hashlib
import re
import sys
import unicodedata

import numpy as np
import xxhash

from pipeline.splitmix import splitmix64

WORD = re.compile(r"\w+")
_SHINGLE_CHUNK = 4096  # shingles hashed under all permutations at once: bounds the scratch matrix
# A cut document's exact key looks this far back from a piece's end for a point where normalization
# may start afresh, and holds back at most this much text when it finds none.
_LOOK_BACK = 64
_MAX_HELD = 2**20


def normalized(text: str) -> str:
    return " ".join(unicodedata.normalize("NFC", text).split())


def exact_key(text: str) -> bytes:
    """16 bytes of BLAKE2b of the normalized text: collisions stay improbable at 10^12 documents."""
    return hashlib.blake2b(
        normalized(text).encode("utf-8", "surrogatepass"), digest_size=16
    ).digest()


@functools.cache
def _composes_with_previous() -> frozenset[str]:
    """The characters canonical composition may join to the character before them: the second half
    of every two-character canonical decomposition, and Hangul's vowel and final jamo."""
    seconds = set()
    for code in range(sys.maxunicode + 1):
        mapping = unicodedata.decomposition(chr(code)).split()
        if len(mapping) == 2 and not mapping[0].startswith("<"):
            seconds.add(chr(int(mapping[1], 16)))
    seconds.update(map(chr, range(0x1161, 0x1176)), map(chr, range(0x11A8, 0x11C3)))
    return frozenset(seconds)


def _starts_fresh(char: str) -> bool:
    """Whether NFC of a text cut before `char` is NFC of each side joined: `char` decomposes to a
    starter that nothing before it composes with, so neither reordering nor composition reaches
    across the cut."""
    if char < "\u0300":  # Latin and ASCII: starters that compose with nothing before them
        return True
    first = unicodedata.normalize("NFD", char)[0]
    return unicodedata.combining(first) == 0 and first not in _composes_with_previous()


class ExactKey:
    """The exact key of a cut document, fed piece by piece: the key of its whole normalized text,
    wherever the cuts fall. Each piece is normalized up to its last point where normalization may
    start afresh (the rest waits for the next piece), and runs of whitespace are joined across the
    cuts: a cut inside a run of text without whitespace joins its two sides with none."""

    def __init__(self) -> None:
        self._hash = hashlib.blake2b(digest_size=16)
        self._held = ""  # text after the last point where normalization may start afresh
        self._words = False  # a word has been hashed
        self._space = False  # whitespace since the last word hashed

    def update(self, piece: str) -> None:
        text = self._held + piece
        at = next(
            (
                i
                for i in range(len(text) - 1, max(len(text) - _LOOK_BACK, 0), -1)
                if _starts_fresh(text[i])
            ),
            0,
        )
        if (
            at == 0 and len(text) > _MAX_HELD
        ):  # no such point near the end of a long text (combining marks alone)
            at = len(text)
        self._held = text[at:]
        self._add(text[:at])

    def _add(self, text: str) -> None:
        text = unicodedata.normalize("NFC", text)
        found = text.split()
        if found:
            if self._words and (self._space or text[0].isspace()):
                self._hash.update(b" ")
            self._hash.update(" ".join(found).encode("utf-8", "surrogatepass"))
            self._words, self._space = True, text[-1].isspace()
        elif text:
            self._space = True

    def digest(self) -> bytes:
        self._add(self._held)
        self._held = ""
        return self._hash.digest()


def words(text: str) -> list[str]:
    """The words compared: runs of `\\w` characters of the NFC, case-folded text."""
    return WORD.findall(unicodedata.normalize("NFC", text).casefold())


def word_hashes(text: str) -> np.ndarray:
    found = words(text)
    return np.fromiter(
        map(xxhash.xxh3_64_intdigest, map(str.encode, found)), dtype=np.uint64, count=len(found)
    )


def ngram_hashes(words: np.ndarray, n: int) -> np.ndarray:
    """One hash per run of `n` consecutive words (none for fewer words), order-sensitive."""
    count = len(words) - n + 1
    if count <= 0:
        return np.zeros(0, dtype=np.uint64)
    h = np.full(count, n, dtype=np.uint64)
    for j in range(n):  # in place: numpy's fresh temporaries cost more than the arithmetic here
        h ^= words[j : j + count]
        h *= _GOLDEN
        h ^= h >> np.uint64(29)
    return h


_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


class NgramStream:
    """The `n`-gram hashes of a document fed a piece at a time: the last `n - 1` words of a piece
    join the next piece's first words, so the n-grams are those of the whole document (pieces are
    cut before a whitespace, so no word is split)."""

    def __init__(self, n: int):
        self._n = n
        self._tail = np.zeros(0, dtype=np.uint64)
        self.words = 0

    def update(self, words: np.ndarray) -> np.ndarray:
        """The n-grams that end in `words`."""
        self.words += len(words)
        joined = np.concatenate([self._tail, words])
        self._tail = joined[len(joined) - min(self._n - 1, len(joined)) :]
        return ngram_hashes(joined, self._n)


class MinHasher:
    """MinHash of word `ngram`-grams: `bands * rows` minimum hashes (32 bits), each under its own
    multiply-add bijection mod 2^32 of the shingles' 32-bit hashes (odd multipliers, fixed
    constants: the same on every machine). Documents of Jaccard similarity s share a band with
    probability 1 - (1 - s^rows)^bands (docs/data-format.md tabulates it).

    A document with fewer than `ngram` words has no shingle, and so no signature: two such documents
    would agree in every band by having nothing, so they are left to exact deduplication."""

    def __init__(self, ngram: int, bands: int, rows: int):
        self.ngram, self.bands, self.rows = ngram, bands, rows
        count = np.uint64(bands * rows)
        self._multipliers = (splitmix64(np.arange(count, dtype=np.uint64)) >> np.uint64(32)).astype(
            np.uint32
        ) | np.uint32(1)
        self._offsets = (
            splitmix64(np.arange(count, 2 * count, dtype=np.uint64)) >> np.uint64(32)
        ).astype(np.uint32)

    def empty(self) -> np.ndarray:
        return np.full(self.bands * self.rows, np.iinfo(np.uint32).max, dtype=np.uint32)

    def update(self, signature: np.ndarray, ngrams: np.ndarray) -> None:
        """Lowers `signature` (in place) by the shingles of these n-gram hashes."""
        shingles = (ngrams >> np.uint64(32)).astype(np.uint32)
        for start in range(0, len(shingles), _SHINGLE_CHUNK):
            hashed = np.multiply.outer(shingles[start : start + _SHINGLE_CHUNK], self._multipliers)
            hashed += self._offsets
            np.minimum(signature, hashed.min(axis=0), out=signature)

    def signature(self, words: np.ndarray) -> np.ndarray | None:
        """The signature of a whole document's words; None for one with fewer than `ngram` words."""
        if len(words) < self.ngram:
            return None
        signature = self.empty()
        self.update(signature, ngram_hashes(words, self.ngram))
        return signature

    def band_keys(self, signatures: np.ndarray) -> np.ndarray:
        """(documents, bands) keys, one per band of each signature; a band's index is part of its
        key, so equal keys mean equal rows in the same band."""
        bands = signatures.reshape(len(signatures), self.bands, self.rows)
        keys = np.broadcast_to(
            np.arange(self.bands, dtype=np.uint64), (len(signatures), self.bands)
        ).copy()
        for row in range(self.rows):
            keys = splitmix64(keys ^ bands[:, :, row].astype(np.uint64))
        return keys
