"""What a work unit reads: documents, counted skips and rejects, as plain values.

Readers yield runs of documents (`DocumentRun`: plain `str`s in lists, since a unit holds tens of
thousands of them and they are handled in bulk, each with where it starts in its input) and record
what they skip, so every input byte is either a document, a counted skip, or a recorded reject:
nothing disappears silently. A document longer than the configured bound arrives as
`DocumentPiece`s instead, in order, so that no worker ever holds one whole.

Where a document starts is a line (of a line format: the newlines between the unit's range start
and the line, as `Reject.line` counts them) or a row (of a columnar format: absolute). The cleaning
stage names removed documents by it, as `rejects.jsonl` names rejected lines.
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
BINARY_FILE = "binary_file"
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
    """One piece of a document too long to hold whole; pieces come in order, `first` marks a start.
    `location` and `id` are the whole document's."""

    text: str
    first: bool
    location: int = 0
    id: Any = None


@dataclasses.dataclass
class DocumentRun:
    """Whole documents in input order and, when the reader was asked for them, where each starts
    and the value of each one's id field (None where it has none)."""

    texts: list[str]
    locations: list[int] | None = None
    ids: list[Any] | None = None  # None also where the format has no records (text)


Read = DocumentRun | DocumentPiece


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
    """Where a piece that starts at `start` ends: at most `limit` bytes on, before the last
    whitespace in the second half of that span.

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


def is_long(text: str, limit: int) -> bool:
    """Whether `text` is over `limit` bytes of UTF-8 (the first test is cheap: a character is at
    most 4 bytes)."""
    return len(text) > limit // 4 and len(text.encode("utf-8", "surrogatepass")) > limit


class DocumentRuns:
    """Collects a reader's documents into what it yields: runs of whole documents, and the pieces
    of a cut one (see `Source.read`)."""

    def __init__(self, limit: int, tally: Tally, *, located: bool = False):
        self._limit = limit
        self._tally = tally
        self._located = located
        self._run = self._empty()

    def _empty(self) -> DocumentRun:
        return DocumentRun([], [], []) if self._located else DocumentRun([])

    def add(self, text: str, location: int, id: Any = None) -> Iterator[Read]:
        """What is ready once `text` is added: a run is handed on every `RUN_LENGTH` documents, and
        before the pieces of a cut one."""
        if not is_long(text, self._limit):
            self._run.texts.append(text)
            if self._located:
                self._run.locations.append(location)
                self._run.ids.append(id)
            if len(self._run.texts) >= RUN_LENGTH:
                yield from self.flush()
            return
        yield from self.flush()
        self._tally.count(CUT_DOCUMENTS)
        for i, piece in enumerate(pieces_of(text.encode("utf-8", "surrogatepass"), self._limit)):
            self._tally.count(DOCUMENT_PIECES)
            yield DocumentPiece(
                piece.decode("utf-8", "surrogatepass"), first=i == 0, location=location, id=id
            )

    def flush(self) -> Iterator[DocumentRun]:
        if self._run.texts:
            yield self._run
            self._run = self._empty()
