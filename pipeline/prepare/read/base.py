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

from pipeline.dataset.storage import FileInfo
from pipeline.prepare.read.documents import BAD_FILE, BINARY_FILE, Read, Tally
from pipeline.prepare.units import WorkUnit
from schemas.errors import RunError
from schemas.prepare_config import PrepareConfig

BOM = b"\xef\xbb\xbf"
# Reads past a unit's end grow from small (the last document usually ends within a few KB) to large.
_FIRST_READ_PAST = 64 * 2**10
_MAX_READ_PAST = 4 * 2**20


class SourceError(RunError, RuntimeError):
    """Input content that cannot be read as asked (corrupt, truncated, not of its format): the
    message names the file and what is wrong. Reading it again fails the same way. `reason` is
    what `--skip-bad-files` counts it as."""

    deterministic = True

    def __init__(self, message: str, reason: str = BAD_FILE):
        super().__init__(message)
        self.reason = reason


# A text or JSON Lines unit is binary when this share of its first bytes are NUL bytes, or bytes of
# no valid UTF-8 character. Text with a stray NUL or a few Latin-1 bytes passes; executables,
# images, archives, UTF-16 and 8-bit encodings of other scripts do not. A sample smaller than the
# minimum tells too little.
BINARY_SAMPLE_BYTES = 64 * 2**10
BINARY_MIN_BYTES = 512
BINARY_SHARE = 0.1


def check_text(sample: bytes, where: str) -> None:
    """Raises SourceError (reason `binary_file`) when `sample`, the first bytes of what a unit
    reads, looks binary rather than UTF-8 text."""
    sample = sample[:BINARY_SAMPLE_BYTES]
    if len(sample) < BINARY_MIN_BYTES:
        return
    nul = sample.count(0)
    try:
        sample.decode("utf-8")
        invalid = 0
    except UnicodeDecodeError:
        # A character cut at either end of the sample is not invalid: 3 bytes each side spared.
        invalid = max(len(sample) - len(sample.decode("utf-8", "ignore").encode("utf-8")) - 6, 0)
    if max(nul, invalid) >= BINARY_SHARE * len(sample):
        raise SourceError(
            f"{where} looks binary, not UTF-8 text ({nul} NUL bytes and {invalid} bytes of no "
            f"UTF-8 character in its first {len(sample)}); remove it from the inputs, or pass "
            "--skip-bad-files to skip it",
            BINARY_FILE,
        )


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
        """The `(start, end)` of each unit of the input, from its metadata (at most a file
        footer)."""

    def read(
        self,
        unit: WorkUnit,
        config: PrepareConfig,
        tally: Tally,
        digest: ContentDigest,
        *,
        located: bool = False,
    ) -> Iterator[Read]:
        """The unit's documents in input order: runs of whole documents, and the pieces of a cut
        document. Skips and rejects go to `tally`, what the unit owns of the input to `digest`. With
        `located`, each document carries where it starts and the value of its `config.id_field`."""


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
        check_text(self.own, f"{unit.path} (bytes {unit.start} to {unit.end})")
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
    """`data` (which starts at a line start) cut at every separator line; each piece is what lies
    between the newline that ends a separator line and the newline before the next, its own
    surrounding whitespace kept. Bytes in, bytes out; text in, text out."""
    return separated(data, separator)[0]


def separated(data: bytes | str, separator: str) -> tuple[list[bytes] | list[str], list[int]]:
    """`split_at_separator_lines(data)`, and how many of data's newlines lie between each piece and
    the next: 2 (the one before the separator line and the one ending it), 1 where the separator
    line has none of its own before it (data starts with it, or it follows another separator line),
    0 where it ends data with no newline after it, nor before it.

    When every occurrence of the separator is a bare line of its own, a plain split finds exactly
    the cuts the regex finds, several times faster (and without copying `data` to wrap it in
    newlines); anything else (spaces, CRLF, consecutive separator lines, the separator inside a
    line) takes the regex.
    """
    text = isinstance(data, str)
    newline, sep = ("\n", separator) if text else (b"\n", separator.encode("utf-8"))
    pieces = data.split(newline + sep + newline)
    between = [2] * (len(pieces) - 1)
    if data.startswith(sep + newline) or data == sep:  # a separator line first, or alone
        pieces[0:1] = [data[:0], pieces[0][len(sep) + 1 :]]
        between[0:0] = [1 if data != sep else 0]
    if data.endswith(newline + sep):  # a separator line last, with no newline after it
        pieces[-1:] = [pieces[-1][: -len(sep) - 1], data[:0]]
        between.append(1)
    if len(pieces) - 1 == data.count(sep):
        return pieces, between
    wrapped = newline + data + newline
    raw = separator_regex(separator, text=text).split(wrapped)
    # A match runs from the newline before its separator line (none of data's when the match starts
    # data) up to the newline that ends the line, which starts the next piece unless another
    # separator line takes it, or it is only the newline added after data.
    between = [
        int(i > 0 or raw[0] != data[:0])
        + int(following[:1] == newline and (i + 2 < len(raw) or following != newline))
        for i, following in enumerate(raw[1:])
    ]
    raw[0] = raw[0][1:]  # the newlines added around `data`
    raw[-1] = raw[-1][:-1]
    return raw[:1] + [piece[1:] if piece[:1] == newline else piece for piece in raw[1:]], between
