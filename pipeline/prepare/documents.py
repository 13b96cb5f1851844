"""What a work unit reads: documents, counted skips and rejects, as plain values.

Readers yield runs of documents' texts (plain `str`s in lists: a unit holds tens of thousands of
them, so they are handled in bulk) and record what they skip, so every input byte is either a
document, a counted skip, or a recorded reject: nothing disappears silently. A document longer than
the configured bound arrives as `DocumentPiece`s instead, each in a list of its own, in order, so
that no worker ever holds one whole.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Iterator
from typing import Any

# Skip reasons (manifest `skipped`) and counts (manifest `counts`).
EMPTY = "empty_document"
MALFORMED_JSON = "malformed_json"
MISSING_TEXT = "missing_text_field"
NON_STRING_TEXT = "non_string_text_field"
LINE_TOO_LONG = "line_too_long"
BAD_FILE = "unreadable_file"
INVALID_UTF8 = "invalid_utf8_documents"
BLANK_LINES = "blank_jsonl_lines"
CUT_DOCUMENTS = "cut_documents"
DOCUMENT_PIECES = "document_pieces"

_WHITESPACE = (b" ", b"\n", b"\t", b"\r", b"\x0b", b"\x0c")


@dataclasses.dataclass(frozen=True)
class Reject:
    """A piece of input that was not used, with where it came from, for `rejects.jsonl`.

    `line` counts the newlines between the start of the unit's byte range and the rejected line:
    the absolute line number needs the units before it, so `finalize` resolves it. `row` is
    absolute already.
    """

    reason: str
    path: str
    detail: str
    line: int | None = None
    row: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class DocumentPiece:
    """One piece of a document too long to hold whole; pieces come in order, `first` marks a start."""

    text: str
    first: bool


Document = str | DocumentPiece


class Tally:
    """Skip and event counters of one unit, kept apart so the manifest can report both."""

    def __init__(self) -> None:
        self.skipped: collections.Counter[str] = collections.Counter()
        self.counts: collections.Counter[str] = collections.Counter()
        self.rejects: list[Reject] = []

    def skip(self, reason: str, n: int = 1) -> None:
        if n:
            self.skipped[reason] += n

    def reject(self, reject: Reject) -> None:
        self.skipped[reject.reason] += 1
        self.rejects.append(reject)

    def count(self, name: str, n: int = 1) -> None:
        self.counts[name] += n


def decode_utf8(data: bytes, tally: Tally) -> str:
    """Invalid UTF-8 is decoded with replacement characters and counted, never dropped."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        tally.count(INVALID_UTF8)
        return data.decode("utf-8", errors="replace")


def cut_point(data: bytes | bytearray, start: int, limit: int) -> int:
    """Where a piece that starts at `start` ends: at most `limit` bytes on, before the last whitespace
    in the second half of that span.

    Cutting before the whitespace leaves it to start the next piece, where the tokenizer would have
    attached it to the following word anyway. Without whitespace, the cut falls on a UTF-8
    character boundary.
    """
    at = max(data.rfind(c, start + limit // 2, start + limit + 1) for c in _WHITESPACE)
    if at > start:
        return at
    at = start + limit
    while at > start + 1 and data[at] & 0xC0 == 0x80:  # a UTF-8 continuation byte
        at -= 1
    return at


def pieces_of(data: bytes, limit: int) -> Iterator[bytes]:
    """`data` cut into pieces of at most `limit` bytes (see `cut_point`)."""
    start = 0
    while len(data) - start > limit:
        end = cut_point(data, start, limit)
        yield data[start:end]
        start = end
    yield data[start:]


RUN_LENGTH = 4096


class DocumentRuns:
    """Collects a reader's documents into the lists it yields: runs of whole documents, each piece
    of a cut document alone (see `Source.read`)."""

    def __init__(self, limit: int, tally: Tally):
        self._limit = limit
        self._tally = tally
        self._run: list[str] = []

    def add(self, text: str) -> Iterator[list[Document]]:
        """The lists ready once `text` is added: a run is handed on every `RUN_LENGTH` documents,
        and before the pieces of a cut one."""
        if len(text) <= self._limit // 4 or len(text.encode("utf-8", "surrogatepass")) <= self._limit:
            self._run.append(text)  # (the first test is cheap: a UTF-8 character is at most 4 bytes)
            if len(self._run) >= RUN_LENGTH:
                yield from self.flush()
            return
        data = text.encode("utf-8", "surrogatepass")
        yield from self.flush()
        self._tally.count(CUT_DOCUMENTS)
        for i, piece in enumerate(pieces_of(data, self._limit)):
            self._tally.count(DOCUMENT_PIECES)
            yield [DocumentPiece(piece.decode("utf-8", "surrogatepass"), first=i == 0)]

    def flush(self) -> Iterator[list[Document]]:
        if self._run:
            yield self._run
            self._run = []
