"""Plain text: documents separated by a separator line, as TinyStories ships them.

A document starts at the file's start or right after a separator line, and a unit owns the
documents that follow the separator lines starting in its byte range (unit 0 also owns the first
document). The last one usually ends a little past the range; one that runs on for longer than
`max_document_bytes` is cut into pieces as it is read, so no document is ever held whole. A
document is cut the same way wherever it lies in its unit: its bytes between the separator lines
(surrounding whitespace included) are cut at the same places, so the pieces do not depend on the
unit size.
"""

from __future__ import annotations

import operator
from collections.abc import Iterator
from itertools import accumulate, compress

from pipeline.dataset import storage
from pipeline.dataset.storage import FileInfo
from pipeline.prepare.read.base import (
    ContentDigest,
    RangeReader,
    byte_ranges,
    separated,
    separator_regex,
)
from pipeline.prepare.read.documents import (
    CUT_DOCUMENTS,
    DOCUMENT_PIECES,
    EMPTY,
    DocumentPiece,
    DocumentRun,
    Read,
    Tally,
    cut_point,
    decode_utf8,
    is_long,
)
from pipeline.prepare.units import WorkUnit
from schemas.prepare_config import PrepareConfig


def _could_be_separator(line: bytes, separator: bytes) -> bool:
    """Whether an unfinished line may still turn out to be a separator line: spaces or tabs ending
    in the separator's own leading ones, the rest of the separator, spaces or tabs (see
    `separator_regex`)."""
    core = separator.lstrip(b" \t")
    rest = line.lstrip(b" \t")
    if not rest:
        return True  # blanks so far, which may yet be the separator's indent
    if not line[: len(line) - len(rest)].endswith(separator[: len(separator) - len(core)]):
        return False
    if len(rest) <= len(core):
        return core.startswith(rest)
    return rest.startswith(core) and not rest[len(core) :].strip(b" \t\r")


class TextSource:
    def plan(self, path: str, info: FileInfo, config: PrepareConfig) -> list[tuple[int, int]]:
        return byte_ranges(info.size, config.unit_bytes)

    def read(
        self,
        unit: WorkUnit,
        config: PrepareConfig,
        tally: Tally,
        digest: ContentDigest,
        *,
        located: bool = False,
    ) -> Iterator[Read]:
        separator = config.separator.encode("utf-8")
        with storage.open_raw(unit.path) as f:
            reader = RangeReader(f, unit, digest, count_newlines=True)
            first = reader.first_line_start()
            if first is None:
                return
            region = reader.own[first:]
            # Finish the line that crosses the range's end while it may be a separator line: only
            # a separator line that starts in the range can end a document here.
            last_line = region[region.rfind(b"\n") + 1 :]
            rest, at_eof = b"", False
            while not region.endswith(b"\n") and _could_be_separator(last_line, separator):
                more = reader.read_past()
                at_eof = not more
                newline = more.find(b"\n")
                if at_eof or newline >= 0:
                    region += more[: newline + 1] if newline >= 0 else b""
                    rest = more[newline + 1 :] if newline >= 0 else b""
                    break
                region += more
                last_line += more
            try:  # decoded whole, as text, when it can be: faster than piece by piece
                pieces, between = separated(region.decode("utf-8"), config.separator)
            except UnicodeDecodeError:
                pieces, between = separated(region, config.separator)
            owned = pieces if unit.start == 0 else pieces[1:]
            if not owned:
                return
            lines = None
            # lines between the range's start and the region's: the newline just before it, if any
            if located:
                lines = _piece_lines(pieces, between, 1 if first else 0)[len(pieces) - len(owned) :]
            yield from _whole_documents(owned[:-1], lines, config.max_document_bytes, tally)
            # The last document runs on past the region, up to the next separator line if any.
            head = owned[-1].encode("utf-8") if isinstance(owned[-1], str) else owned[-1]
            yield from _finish(
                bytearray(head + rest), lines and lines[-1], reader, config, tally, at_eof=at_eof
            )


def _piece_lines(pieces: list[bytes] | list[str], between: list[int], first: int) -> list[int]:
    """The line each piece of `separated` starts on, `first` being the first's."""
    newline = "\n" if pieces and isinstance(pieces[0], str) else b"\n"
    # In bulk (map and accumulate run in C): a unit holds tens of thousands of documents.
    return list(
        accumulate(
            map(operator.add, map(operator.methodcaller("count", newline), pieces), between),
            initial=first,
        )
    )


def _whole_documents(
    pieces: list[bytes] | list[str], lines: list[int] | None, limit: int, tally: Tally
) -> Iterator[Read]:
    """The pieces between separator lines as documents, stripped (blank ones are counted skips), in
    runs, with the lines they start on when given; one over `limit` bytes is cut as `_finish` cuts
    it.

    In bulk (comprehensions, and C's map and compress): a unit holds tens of thousands of documents.
    """
    if not pieces:
        return
    text = isinstance(pieces[0], str)
    quarter = limit // 4 if text else limit  # a character is at most 4 bytes: the cheap test first
    long = []
    if max(map(len, pieces)) > quarter:
        long = [
            i
            for i, piece in enumerate(pieces)
            if len(piece) > quarter and (not text or is_long(piece, limit))
        ]
    start = 0
    for end in [*long, len(pieces)]:
        texts = (
            [piece.strip() for piece in pieces[start:end]]
            if text
            else [decode_utf8(piece, tally).strip() for piece in pieces[start:end]]
        )
        kept = texts if all(texts) else list(compress(texts, texts))
        tally.skip(EMPTY, len(texts) - len(kept))
        if kept:
            yield DocumentRun(
                kept, None if lines is None else list(compress(lines[start:end], texts))
            )
        if end < len(pieces):
            data = pieces[end].encode("utf-8", "surrogatepass") if text else pieces[end]
            yield from _cut(bytearray(data), lines and lines[end], limit, tally)
        start = end + 1


def _cut(
    data: bytearray, line: int | None, limit: int, tally: Tally, *, pieces: int = 0
) -> Iterator[DocumentPiece]:
    """A document's bytes over `limit`, from piece number `pieces` on, cut as `_finish` cuts
    them."""
    while len(data) > limit:
        cut = cut_point(data, 0, limit)
        yield from _emit(bytes(data[:cut]), line, tally, piece=pieces, more=True)
        del data[:cut]
        pieces += 1
    yield from _emit(bytes(data), line, tally, piece=pieces)


def _finish(
    buf: bytearray,
    line: int | None,
    reader: RangeReader,
    config: PrepareConfig,
    tally: Tally,
    *,
    at_eof: bool,
) -> Iterator[Read]:
    """The document whose bytes begin `buf` (at a line start, `line`), read on to the next
    separator line.

    A document still unfinished past `max_document_bytes` is cut at a whitespace (see `cut_point`)
    and handed on in pieces, so memory stays bounded however long it runs.
    """
    pattern = separator_regex(config.separator)
    separator = config.separator.encode("utf-8")
    limit = config.max_document_bytes
    scanned = 0  # no separator line starts in buf[:scanned], except maybe its last line
    pieces = 0
    while True:
        prefix = b"\n" if not pieces else b""  # a cut piece does not start a line
        start = max(0, len(prefix) + buf.rfind(b"\n", 0, scanned))
        match = pattern.search(prefix + buf + (b"\n" if at_eof else b""), start)
        end = None if match is None else max(match.start() - len(prefix), 0)
        last_line = buf[buf.rfind(b"\n") + 1 :]
        settled = end is not None or at_eof or not _could_be_separator(last_line, separator)
        if (len(buf) if end is None else end) > limit and settled:
            cut = cut_point(buf, 0, limit)
            yield from _emit(bytes(buf[:cut]), line, tally, piece=pieces, more=True)
            del buf[:cut]
            pieces += 1
            scanned = 0
            continue
        if end is not None:
            yield from _emit(bytes(buf[:end]), line, tally, piece=pieces)
            return
        if at_eof:
            yield from _emit(bytes(buf), line, tally, piece=pieces, trailing=True)
            return
        scanned = len(buf)
        more = reader.read_past()
        at_eof = not more
        buf += more


def _emit(
    data: bytes,
    line: int | None,
    tally: Tally,
    *,
    piece: int = 0,
    more: bool = False,
    trailing: bool = False,
) -> Iterator[Read]:
    """A whole document, or piece number `piece` of a cut one (`more`: pieces follow), starting on
    `line`.

    `trailing`: the text after the file's last separator, which is no skipped document when blank.
    """
    text = decode_utf8(data, tally)
    if not piece and not more:
        if text.strip():
            yield DocumentRun([text.strip()], None if line is None else [line])
        elif not trailing:
            tally.skip(EMPTY)
        return
    text = text.lstrip() if not piece else text if more else text.rstrip()
    if not text and piece and not more:
        return  # the blanks that ended a cut document: no piece of it
    if not piece:
        tally.count(CUT_DOCUMENTS)
    tally.count(DOCUMENT_PIECES)
    yield DocumentPiece(text, first=not piece, location=line or 0)
