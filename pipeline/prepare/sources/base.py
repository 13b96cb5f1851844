"""The interface every input format implements, and the byte-range reading the line formats share.

Planning reads no content: a line format's units are fixed byte ranges, and a worker decides which
documents its range owns (those that start in it) by reading a byte before it and past its end. So
the launcher's cost does not grow with the data, and every unit still sees whole documents.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from typing import BinaryIO, Protocol

import numpy as np

from pipeline.prepare.documents import Document, Tally
from pipeline.prepare.units import WorkUnit
from pipeline.storage import FileInfo
from schemas.manifest import PrepareConfig

BOM = b"\xef\xbb\xbf"
# Reads past a unit's end grow from small (the last document usually ends within a few KB) to large.
_FIRST_READ_PAST = 64 * 2**10
_MAX_READ_PAST = 4 * 2**20


class SourceError(RuntimeError):
    """Input content that cannot be read as asked (corrupt, truncated, not of its format): the
    message names the file and what is wrong. Reading it again fails the same way."""

    deterministic = True


class ContentDigest:
    """SHA-256 and newline count of exactly what a unit owns of its input, fed as it is read."""

    def __init__(self) -> None:
        self._sha256 = hashlib.sha256()
        self.newlines = 0

    def update(self, data: bytes, *, count_newlines: bool = False) -> None:
        self._sha256.update(data)
        if count_newlines:
            self.newlines += count_newlines_in(data)

    def hexdigest(self) -> str:
        return self._sha256.hexdigest()


class Source(Protocol):
    def plan(self, path: str, info: FileInfo, config: PrepareConfig) -> list[tuple[int, int]]:
        """The `(start, end)` of each unit of the input, from its metadata (at most a file footer)."""

    def read(
        self, unit: WorkUnit, config: PrepareConfig, tally: Tally, digest: ContentDigest
    ) -> Iterator[list[Document]]:
        """The unit's documents in input order, in lists: runs of whole documents, and each piece
        of a cut document in a list of its own. Skips and rejects go to `tally`, what the unit owns
        of the input to `digest`."""


def byte_ranges(size: int, unit_bytes: int) -> list[tuple[int, int]]:
    return [(start, min(start + unit_bytes, size)) for start in range(0, size, unit_bytes)]


def count_newlines_in(block: bytes) -> int:
    # About 3x faster than bytes.count.
    return int(np.count_nonzero(np.frombuffer(block, dtype=np.uint8) == ord("\n")))


class RangeReader:
    """A unit's byte range `[start, end)` of an open input, then, on demand, the bytes past it.

    Only the range itself goes to the digest: the bytes past it belong to the next unit's digest.
    """

    def __init__(self, f: BinaryIO, unit: WorkUnit, digest: ContentDigest, *, count_newlines: bool):
        self._f = f
        f.seek(max(unit.start - 1, 0))
        before = f.read(1) if unit.start else b""
        self.own = f.read(unit.end - unit.start)
        if len(self.own) != unit.end - unit.start:
            raise SourceError(
                f"{unit.path}: expected {unit.end - unit.start} bytes at offset {unit.start}, "
                f"read {len(self.own)}; did the file change since it was planned?"
            )
        digest.update(self.own, count_newlines=count_newlines)
        # Whether `start` is a line start: the file's start, or right after a newline.
        self.starts_line = not unit.start or before == b"\n"
        if unit.start == 0 and BOM.startswith(self.own[: len(BOM)]):
            # A byte-order mark is no text; the range may even end inside it.
            rest = f.read(max(len(BOM) - len(self.own), 0))
            if (self.own + rest).startswith(BOM):
                self.own = self.own[len(BOM) :]
            else:
                f.seek(unit.end)
        self._next_read = _FIRST_READ_PAST

    def first_line_start(self) -> int | None:
        """Offset in `own` of the first line that starts in the range, or None if none does."""
        if self.starts_line:
            return 0
        newline = self.own.find(b"\n")
        return None if newline < 0 or newline + 1 == len(self.own) else newline + 1

    def read_past(self) -> bytes:
        """The next bytes past what was read, b"" at the end of the file."""
        data = self._f.read(self._next_read)
        self._next_read = min(2 * self._next_read, _MAX_READ_PAST)
        return data


def separator_regex(separator: str, *, text: bool = False) -> re.Pattern:
    """A whole line holding only the separator (spaces and a CRLF ending allowed), over bytes, or
    over str with `text`.

    Matches from the newline before the line up to, not including, the newline after it, so
    consecutive separator lines all match; apply it to the data wrapped in newlines.
    """
    pattern = r"\n[ \t]*" + re.escape(separator) + r"[ \t]*\r?(?=\n)"
    return re.compile(pattern if text else pattern.encode("utf-8"))


def split_at_separator_lines(data: bytes | str, separator: str) -> list[bytes] | list[str]:
    """`data` (which starts at a line start) cut at every separator line; the pieces keep their
    surrounding whitespace. Bytes in, bytes out; text in, text out.

    When every occurrence of the separator is a bare line of its own, a plain split finds exactly
    the cuts the regex finds, several times faster (and without copying `data` to wrap it in
    newlines); anything else (spaces, CRLF, consecutive separator lines, the separator inside a
    line) takes the regex.
    """
    text = isinstance(data, str)
    newline, sep = ("\n", separator) if text else (b"\n", separator.encode("utf-8"))
    pieces = data.split(newline + sep + newline)
    if data.startswith(sep + newline) or data == sep:  # a separator line first, or alone
        pieces[0:1] = [data[:0], pieces[0][len(sep) + 1 :]]
    if data.endswith(newline + sep):  # a separator line last, with no newline after it
        pieces[-1:] = [pieces[-1][: -len(sep) - 1], data[:0]]
    if len(pieces) - 1 == data.count(sep):
        return pieces
    pieces = separator_regex(separator, text=text).split(newline + data + newline)
    pieces[0], pieces[-1] = pieces[0][1:], pieces[-1][:-1]  # the newlines added around `data`
    return pieces
