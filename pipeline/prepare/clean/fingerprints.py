"""What the cleaning stage knows of a document: an exact-text hash, MinHash band keys, and whether
it shares a word n-gram with an eval example.

Exact duplicates are documents equal after `normalized`: Unicode NFC, every run of whitespace one
space, none at either end; case is kept. Near duplicates and eval matches compare words: runs of
Unicode word characters (`\\w+`) of the NFC, case-folded text, so punctuation and case do not hide a
match. Every hash is a fixed function (BLAKE2b, xxh3, SplitMix64), the same on every machine.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata

import numpy as np
import xxhash

from pipeline.splitmix import splitmix64

WORD = re.compile(r"\w+")
_SHINGLE_CHUNK = 4096  # shingles hashed under all permutations at once: bounds the scratch matrix


def normalized(text: str) -> str:
    return " ".join(unicodedata.normalize("NFC", text).split())


def exact_key(text: str) -> bytes:
    """16 bytes of BLAKE2b of the normalized text: collisions stay improbable at 10^12 documents."""
    return hashlib.blake2b(
        normalized(text).encode("utf-8", "surrogatepass"), digest_size=16
    ).digest()


class ExactKey:
    """The exact key of a cut document, fed piece by piece: pieces are cut before whitespace, so
    joining their normalized texts with one space gives the whole document's normalized text."""

    def __init__(self) -> None:
        self._hash = hashlib.blake2b(digest_size=16)
        self._empty = True

    def update(self, piece: str) -> None:
        text = normalized(piece)
        if text:
            self._hash.update(
                (text if self._empty else " " + text).encode("utf-8", "surrogatepass")
            )
            self._empty = False

    def digest(self) -> bytes:
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
