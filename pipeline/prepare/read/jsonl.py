"""JSON Lines, plain or compressed (`.gz`, `.zst`), one document per line in a text field.

A plain file's unit owns the lines that start in its byte range. A compressed stream cannot be
entered mid-way, so a compressed file is one unit, read as a stream: its memory stays bounded
whatever the file's size, but its time does not (split large corpora into several files).
"""

from __future__ import annotations

import hashlib
import json
import zlib
from collections.abc import Generator, Iterable, Iterator
from typing import Any

import zstandard

from pipeline.dataset import storage
from pipeline.dataset.storage import FileInfo
from pipeline.prepare.read.base import (
    BOM,
    ContentDigest,
    RangeReader,
    SourceError,
    byte_ranges,
    check_text,
)
from pipeline.prepare.read.documents import (
    BLANK_LINES,
    EMPTY,
    LINE_TOO_LONG,
    MALFORMED_JSON,
    MISSING_TEXT,
    NON_STRING_TEXT,
    DocumentRuns,
    Read,
    Reject,
    Tally,
    decode_utf8,
)
from pipeline.prepare.units import WorkUnit
from schemas.prepare_config import PrepareConfig

_CHUNK = 4 * 2**20
# zstandard's decompressor takes no output bound, so compressed input goes in slices this small:
# one slice expands to at most 32 MiB (a 128 KiB block from 4 bytes).
_ZSTD_FEED = 2**10
_ZLIB_DECOMPRESS = type(zlib.decompressobj())
# A line this many times the document bound is refused unparsed: parsing it would hold it whole.
_LINE_LIMIT_FACTOR = 4


def compression_of(path: str) -> str | None:
    for suffix in ("gz", "zst"):
        if path.endswith(f".{suffix}"):
            return suffix
    return None


def _decompressor(compression: str):
    if compression == "gz":
        return zlib.decompressobj(wbits=47)  # gzip or zlib header, auto-detected
    return zstandard.ZstdDecompressor().decompressobj()


def _decompressed_chunks(f, path: str, compression: str, digest: ContentDigest) -> Iterator[bytes]:
    """Streams every member/frame; a stream that ends mid-member is an error, not a short read.

    Zero bytes after the last member are padding (tape blocks, some uploaders), accepted as GNU
    gzip accepts them; any other trailing byte is corrupt data.
    """
    decoder = _decompressor(compression)
    started, padding = False, False
    while raw := f.read(_CHUNK):
        digest.update(raw)
        while raw:
            if padding or (not started and raw[0] == 0):
                if raw.strip(b"\x00"):
                    raise SourceError(
                        f"{path}: corrupt {compression} data: non-zero bytes after zero padding"
                    )
                padding = True
                break
            started = True
            try:
                raw = yield from _inflate(decoder, raw)
            except (zlib.error, zstandard.ZstdError) as e:
                raise SourceError(f"{path}: corrupt {compression} data: {e}") from None
            if not decoder.eof:
                break
            decoder = _decompressor(compression)
            started = False
    if started and not decoder.eof:
        raise SourceError(
            f"{path}: truncated {compression} stream (ends inside a compressed block)"
        )


def _inflate(decoder, raw: bytes) -> Generator[bytes, None, bytes]:
    """The output of `raw` in pieces of bounded size, however far it expands (a long run of one
    byte compresses a thousandfold and more); returns the bytes after the member's or frame's end,
    b"" if it did not end in `raw`."""
    if isinstance(decoder, _ZLIB_DECOMPRESS):
        while True:
            out = decoder.decompress(raw, _CHUNK)
            raw = decoder.unconsumed_tail
            if out:
                yield out
            if decoder.eof:
                return decoder.unused_data
            if not raw and len(out) < _CHUNK:
                return b""  # all input taken and no output held back
    pending, size = [], 0  # small outputs joined, so that lines are split in large chunks
    for start in range(0, len(raw), _ZSTD_FEED):
        out = decoder.decompress(raw[start : start + _ZSTD_FEED])
        pending.append(out)
        size += len(out)
        if decoder.eof:
            yield b"".join(pending)
            return decoder.unused_data + raw[start + _ZSTD_FEED :]
        if size >= _CHUNK:
            yield b"".join(pending)
            pending, size = [], 0
    if size:
        yield b"".join(pending)
    return b""


def _lines(chunks: Iterable[bytes], limit: int) -> Iterator[bytes | None]:
    """The stream's lines; None for a line longer than `limit`, whichever chunks it spans.

    A line that crosses chunks grows in place, and is let go as soon as it is too long: at most
    `limit` bytes of it are ever held.
    """
    tail, too_long = bytearray(), False
    for chunk in chunks:
        parts = chunk.split(b"\n")
        too_long = too_long or len(tail) + len(parts[0]) > limit
        if too_long:
            tail.clear()
        else:
            tail += parts[0]
        if len(parts) == 1:
            continue
        yield None if too_long else bytes(tail)
        yield from (None if len(line) > limit else line for line in parts[1:-1])
        too_long = len(parts[-1]) > limit
        tail = bytearray() if too_long else bytearray(parts[-1])
    if tail or too_long:
        yield None if too_long else bytes(tail)


class JsonlSource:
    def plan(self, path: str, info: FileInfo, config: PrepareConfig) -> list[tuple[int, int]]:
        if compression_of(path) is not None:
            return [(0, info.size)] if info.size else []
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
        limit = _LINE_LIMIT_FACTOR * config.max_document_bytes
        with storage.open_raw(unit.path) as f:
            compression = compression_of(unit.path)
            if compression is not None:
                lines = _lines(
                    _checked(_decompressed_chunks(f, unit.path, compression, digest), unit.path),
                    limit,
                )
                first_offset = 0
            else:
                reader = RangeReader(f, unit, digest, count_newlines=True)
                first = reader.first_line_start()
                if first is None:
                    return
                lines = _lines(_owned_lines(reader, first), limit)
                # Newlines between the range's start and its first line: the one just before it.
                first_offset = 1 if first else 0
            runs = DocumentRuns(config.max_document_bytes, tally, located=located)
            for offset, line in enumerate(lines, start=first_offset):
                if line is None:
                    tally.reject(
                        Reject(LINE_TOO_LONG, unit.path, f"longer than {limit} bytes", line=offset)
                    )
                    continue
                if unit.start == 0 and offset == 0 and line.startswith(BOM):
                    line = line[len(BOM) :]
                parsed = _parse_line(line, unit.path, offset, config, tally, located)
                if parsed is not None:
                    yield from runs.add(parsed[0], offset, parsed[1])
            yield from runs.flush()


def _checked(chunks: Iterator[bytes], path: str) -> Iterator[bytes]:
    """The decompressed stream, its first chunk checked to be text (see `check_text`)."""
    first = True
    for chunk in chunks:
        if first:
            check_text(chunk, path)
            first = False
        yield chunk


def _owned_lines(reader: RangeReader, first: int) -> Iterator[bytes]:
    """The range from its first line start, then past its end up to the end of its last line."""
    region = reader.own[first:]
    yield region
    if region.endswith(b"\n"):
        return
    while more := reader.read_past():
        newline = more.find(b"\n")
        if newline >= 0:
            yield more[:newline]
            return
        yield more


def _parse_line(
    line: bytes, path: str, offset: int, config: PrepareConfig, tally: Tally, located: bool
) -> tuple[str, Any] | None:
    """The line's text and (`located`) the value of its id field, None if it has none; None for a
    line that is a counted skip or a recorded reject."""
    field = config.text_field
    if not line.strip():
        tally.count(BLANK_LINES)
        return None
    try:
        record = json.loads(decode_utf8(line, tally))
    except json.JSONDecodeError as e:
        preview = hashlib.sha256(line).hexdigest()[:12]
        tally.reject(Reject(MALFORMED_JSON, path, f"{e.msg} (line sha256 {preview})", line=offset))
        return None
    if not isinstance(record, dict) or field not in record or record[field] is None:
        tally.reject(Reject(MISSING_TEXT, path, f"no {field!r} field", line=offset))
        return None
    text = record[field]
    if not isinstance(text, str):
        tally.reject(
            Reject(NON_STRING_TEXT, path, f"{field!r} is {type(text).__name__}", line=offset)
        )
        return None
    if not text.strip():
        tally.skip(EMPTY)
        return None
    return text, record.get(config.id_field) if located else None
