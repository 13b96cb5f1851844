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
# MinHash over word 5-grams, 14 bands of 8 rows (datatrove's choice): documents of Jaccard
# similarity s collide in some band with probability 1-(1-s^8)^14 (docs/data-format.md tabulates it).
NEAR_NGRAM = 5
BANDS = 14
ROWS = 8
_SHINGLE_CHUNK = 4096  # shingles hashed under all permutations at once: bounds the scratch matrix


def normalized(text: str) -> str:
    return " ".join(unicodedata.normalize("NFC", text).split())


def exact_key(text: str) -> bytes:
    """16 bytes of BLAKE2b of the normalized text: collisions stay improbable at 10^12 documents."""
    return hashlib.blake2b(normalized(text).encode("utf-8", "surrogatepass"), digest_size=16).digest()


class ExactKey:
    """The exact key of a cut document, fed piece by piece: pieces are cut before whitespace, so
    joining their normalized texts with one space gives the whole document's normalized text."""

    def __init__(self) -> None:
        self._hash = hashlib.blake2b(digest_size=16)
        self._empty = True

    def update(self, piece: str) -> None:
        text = normalized(piece)
        if text:
            self._hash.update((text if self._empty else " " + text).encode("utf-8", "surrogatepass"))
            self._empty = False

    def digest(self) -> bytes:
        return self._hash.digest()


def word_hashes(text: str) -> np.ndarray:
    words = WORD.findall(unicodedata.normalize("NFC", text).casefold())
    return np.fromiter(
        map(xxhash.xxh3_64_intdigest, map(str.encode, words)), dtype=np.uint64, count=len(words)
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
_MULTIPLIERS = (splitmix64(np.arange(BANDS * ROWS, dtype=np.uint64)) >> np.uint64(32)).astype(np.uint32) | np.uint32(1)
_OFFSETS = (splitmix64(np.arange(BANDS * ROWS, 2 * BANDS * ROWS, dtype=np.uint64)) >> np.uint64(32)).astype(np.uint32)


def minhash(words: np.ndarray) -> np.ndarray:
    """The BANDS*ROWS minimum hashes (32 bits) of the document's word 5-grams (a document of fewer
    words is one shingle of them all), each under its own multiply-add bijection mod 2^32 of the
    shingles' 32-bit hashes."""
    shingles = (ngram_hashes(words, min(NEAR_NGRAM, max(len(words), 1))) >> np.uint64(32)).astype(np.uint32)
    signature = np.full(BANDS * ROWS, np.iinfo(np.uint32).max, dtype=np.uint32)
    for start in range(0, len(shingles), _SHINGLE_CHUNK):
        hashed = np.multiply.outer(shingles[start : start + _SHINGLE_CHUNK], _MULTIPLIERS)
        hashed += _OFFSETS
        np.minimum(signature, hashed.min(axis=0), out=signature)
    return signature


def band_keys(signatures: np.ndarray) -> np.ndarray:
    """(documents, BANDS) keys, one per band of each signature; a band's index is part of its key,
    so equal keys mean equal rows in the same band."""
    bands = signatures.reshape(len(signatures), BANDS, ROWS)
    keys = np.broadcast_to(np.arange(BANDS, dtype=np.uint64), (len(signatures), BANDS)).copy()
    for row in range(ROWS):
        keys = splitmix64(keys ^ bands[:, :, row].astype(np.uint64))
    return keys
