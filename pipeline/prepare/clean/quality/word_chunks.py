"""The whitespace chunks of a batch of texts, found and hashed with numpy: what the fast filters'
word cache is keyed by.

spaCy's tokenizer, which datatrove's English word split is, first cuts a text where `str.isspace`
says, as `str.split` does, then splits each chunk by its own rules; a chunk's words depend on the
chunk alone. So a batch's texts are joined by spaces and encoded to UTF-32 once, and numpy finds
every chunk and a 64-bit hash of it: a polynomial over its code points (an xxh3 digest for chunks
over `LONG` characters, where a polynomial modulo 2^64 is weak), mixed with its length. The hash is
a function of the characters alone, the same in every process: decisions may depend on it.
"""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import xxhash

from pipeline.splitmix import splitmix64

# Not whitespace, by code point: every character `str.isspace` takes is at most U+3000, and the
# last entry stands for all above it.
_WORD_CHARACTER = np.array([not chr(c).isspace() for c in range(0x3001)] + [True], dtype=bool)
_BASE = 0x100000001B3  # the polynomial's base (odd, so invertible modulo 2^64)
_BASE_INVERSE = pow(_BASE, -1, 1 << 64)
_LENGTH_MIX = np.uint64(0x9E3779B97F4A7C15)
LONG = 200  # longer strings are hashed with xxh3
_WINDOW = 1 << 20  # characters of text whose strings are hashed together
_SURROGATE = re.compile("[\ud800-\udfff]")


def without_surrogates(text: str) -> str:
    """The text with each lone surrogate (a JSON `\\ud800` escape, which `str` holds but neither
    spaCy nor fastText's binding takes) as U+FFFD."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return _SURROGATE.sub("\ufffd", text)
    return text


def code_points(text: str) -> np.ndarray:
    """One uint32 per character (lone surrogates included, as `str` holds them)."""
    return np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)


class _Powers:
    """BASE^i and BASE^-i modulo 2^64 for i < n, made once per process."""

    def __init__(self) -> None:
        self.up = self.down = np.ones(1, dtype=np.uint64)

    def get(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        if len(self.up) < n:
            with np.errstate(over="ignore"):
                self.up = np.cumprod(np.full(n, _BASE, dtype=np.uint64)) * np.uint64(_BASE_INVERSE)
                self.down = np.cumprod(np.full(n, _BASE_INVERSE, dtype=np.uint64)) * np.uint64(
                    _BASE
                )
        return self.up, self.down


_POWERS = _Powers()


def _polynomials(
    points: np.ndarray, starts: np.ndarray, ends: np.ndarray, lengths: np.ndarray
) -> np.ndarray:
    """The mixed polynomial of each span of `points` (at most `_WINDOW + LONG` of them)."""
    up, down = _POWERS.get(_WINDOW + LONG + 1)
    with np.errstate(over="ignore"):
        prefix = np.zeros(len(points) + 1, dtype=np.uint64)
        np.cumsum(points * up[: len(points)], out=prefix[1:])
        return splitmix64((prefix[ends] - prefix[starts]) * down[starts] + lengths * _LENGTH_MIX)


def string_hashes(
    text: str, points: np.ndarray, starts: np.ndarray, ends: np.ndarray
) -> np.ndarray:
    """A 64-bit hash of each `text[starts[i]:ends[i]]` (`points`: `code_points(text)`; `starts`
    ascending), never 0. A longer text's polynomials are summed a window at a time, so that a long
    document needs no arrays the size of its text."""
    lengths = (ends - starts).astype(np.uint64)
    if len(points) <= _WINDOW:
        hashes = _polynomials(points, starts, ends, lengths)
    else:
        hashes = np.zeros(len(starts), dtype=np.uint64)
        short = np.flatnonzero(lengths <= LONG)
        window = short[np.flatnonzero(np.diff(starts[short] // _WINDOW, prepend=-1))]
        for first, last in zip(
            np.searchsorted(short, window), [*np.searchsorted(short, window[1:]), len(short)]
        ):
            at = short[first:last]
            base = starts[at[0]]
            hashes[at] = _polynomials(
                points[base : ends[at].max()], starts[at] - base, ends[at] - base, lengths[at]
            )
    for i in np.flatnonzero(lengths > LONG).tolist():
        hashes[i] = xxhash.xxh3_64_intdigest(
            text[starts[i] : ends[i]].encode("utf-8", "surrogatepass")
        )
    hashes[hashes == 0] = 1  # 0 marks an empty slot of `HashTable`
    return hashes


def hashes_of(strings: list[str]) -> np.ndarray:
    """`string_hashes` of each string, as it would be hashed inside any text."""
    if not strings:
        return np.zeros(0, dtype=np.uint64)
    lengths = np.fromiter(map(len, strings), dtype=np.int64, count=len(strings))
    starts = np.concatenate(([0], np.cumsum(lengths + 1)[:-1]))
    text = " ".join(strings)
    return string_hashes(text, code_points(text), starts, starts + lengths)


@dataclasses.dataclass(frozen=True)
class Chunks:
    """The chunks of some texts joined by single spaces into `text` (`points` its code points):
    chunk `i` is `text[starts[i]:ends[i]]`, the chunks of text `t` are `bounds[t]:bounds[t + 1]`."""

    text: str
    points: np.ndarray
    starts: np.ndarray
    ends: np.ndarray
    hashes: np.ndarray
    bounds: np.ndarray

    def strings(self, which: np.ndarray) -> list[str]:
        text = self.text
        return [text[a:b] for a, b in zip(self.starts[which].tolist(), self.ends[which].tolist())]

    def one_space_after(self) -> np.ndarray:
        """Whether chunk `i` is followed by exactly one ' ' and then another chunk (where a text
        ends, that is the space the texts were joined with)."""
        gap = self.starts[1:] - self.ends[:-1]
        single = gap == 1
        single[single] = self.points[self.ends[:-1][single]] == 32
        return np.concatenate((single, [False]))


def chunks(texts: list[str], word_character: np.ndarray = _WORD_CHARACTER) -> Chunks:
    """`word_character`: by code point, whether it is part of a chunk (the last entry stands for
    all above), `str.isspace`'s complement by default; a space never is."""
    text = " ".join(texts)
    points = code_points(text)
    word = np.take(word_character, points, mode="clip").view(np.int8)
    step = np.diff(word)
    starts = np.flatnonzero(step == 1) + 1
    ends = np.flatnonzero(step == -1) + 1
    if len(word) and word[0]:
        starts = np.concatenate(([0], starts))
    if len(word) and word[-1]:
        ends = np.concatenate((ends, [len(word)]))
    lengths = np.fromiter(map(len, texts), dtype=np.int64, count=len(texts))
    text_starts = np.concatenate(([0], np.cumsum(lengths + 1)[:-1]))
    bounds = np.append(np.searchsorted(starts, text_starts), len(starts))
    return Chunks(text, points, starts, ends, string_hashes(text, points, starts, ends), bounds)


class HashTable:
    """uint64 keys (never 0) to int64 values: open addressing with linear probing, vectorized."""

    def __init__(self, bits: int = 16):
        self._bits = bits
        self._keys = np.zeros(1 << bits, dtype=np.uint64)
        self._values = np.full(1 << bits, -1, dtype=np.int64)
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def _home(self, keys: np.ndarray) -> np.ndarray:
        return (keys >> np.uint64(64 - self._bits)).astype(np.int64)

    def lookup(self, keys: np.ndarray) -> np.ndarray:
        """Each key's value, -1 where it is absent."""
        found = np.full(len(keys), -1, dtype=np.int64)
        slot = self._home(keys)
        pending = np.arange(len(keys))
        mask = (1 << self._bits) - 1
        while len(pending):
            there = self._keys[slot]
            hit = there == keys[pending]
            found[pending[hit]] = self._values[slot[hit]]
            going = ~hit & (there != 0)
            pending, slot = pending[going], (slot[going] + 1) & mask
        return found

    def insert(self, keys: np.ndarray, values: np.ndarray) -> None:
        """Adds distinct keys that are not in the table."""
        if (self._count + len(keys)) * 2 > len(self._keys):
            occupied = self._keys != 0
            old_keys, old_values = self._keys[occupied], self._values[occupied]
            while (self._count + len(keys)) * 2 > (1 << self._bits):
                self._bits += 1
            self._keys = np.zeros(1 << self._bits, dtype=np.uint64)
            self._values = np.full(1 << self._bits, -1, dtype=np.int64)
            self._count = 0
            self._place(old_keys, old_values)
        self._place(keys, values)

    def _place(self, keys: np.ndarray, values: np.ndarray) -> None:
        mask = (1 << self._bits) - 1
        slot = self._home(keys)
        pending = np.arange(len(keys))
        while len(pending):
            free = np.flatnonzero(self._keys[slot] == 0)
            _, first = np.unique(slot[free], return_index=True)  # one key per free slot
            placed_at = free[first]
            self._keys[slot[placed_at]] = keys[pending[placed_at]]
            self._values[slot[placed_at]] = values[pending[placed_at]]
            left = np.ones(len(pending), dtype=bool)
            left[placed_at] = False
            pending, slot = pending[left], slot[left]
            slot = np.where(self._keys[slot] != 0, (slot + 1) & mask, slot)
        self._count += len(keys)
