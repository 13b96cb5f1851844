"""JSON Lines, plain or compressed (`.gz`, `.zst`), one document per line in a text field."""

from __future__ import annotations

import hashlib
import json
import zlib
from collections.abc import Iterable, Iterator

import zstandard

from pipeline import storage
from pipeline.prepare.documents import (
    BLANK_LINES,
    EMPTY,
    MALFORMED_JSON,
    MISSING_TEXT,
    NON_STRING_TEXT,
    Reject,
    Tally,
    decode_utf8,
)
from pipeline.prepare.sources.base import BOM, SourceError, plan_byte_ranges, read_range
from pipeline.prepare.units import WorkUnit
from schemas.manifest import InputInfo, PrepareConfig

_CHUNK = 4 * 2**20


def compression_of(path: str) -> str | None:
    for suffix in ("gz", "zst"):
        if path.endswith(f".{suffix}"):
            return suffix
    return None


def _decompressor(compression: str):
    if compression == "gz":
        return zlib.decompressobj(wbits=47)  # gzip or zlib header, auto-detected
    return zstandard.ZstdDecompressor().decompressobj()


def _decompressed_chunks(path: str, compression: str) -> Iterator[bytes]:
    """Streams every member/frame; a stream that ends mid-member is an error, not a short read."""
    decoder = _decompressor(compression)
    started = False
    with storage.open_raw(path) as f:
        while raw := f.read(_CHUNK):
            while raw:
                started = True
                try:
                    out = decoder.decompress(raw)
                except (zlib.error, zstandard.ZstdError) as e:
                    raise SourceError(f"{path}: corrupt {compression} data: {e}") from None
                if out:
                    yield out
                if not decoder.eof:
                    break
                raw = decoder.unused_data
                decoder = _decompressor(compression)
                started = False
    if started and not decoder.eof:
        raise SourceError(f"{path}: truncated {compression} stream (ends inside a compressed block)")


def _lines(chunks: Iterable[bytes]) -> Iterator[bytes]:
    tail = b""
    for chunk in chunks:
        parts = (tail + chunk).split(b"\n")
        tail = parts.pop()
        yield from parts
    if tail:
        yield tail


class JsonlSource:
    def fingerprint_and_plan(
        self, path: str, config: PrepareConfig
    ) -> tuple[InputInfo, list[WorkUnit]]:
        compression = compression_of(path)
        if compression is None:
            return plan_byte_ranges(path, "jsonl", config, _after_newline)
        # A compressed stream cannot be entered mid-way: the whole file is one unit.
        size = storage.size(path)
        info = InputInfo(path=path, format="jsonl", size=size, sha256=storage.sha256_of(path))
        return info, [WorkUnit(0, 0, path, "jsonl", 0, size, 1)]

    def read(self, unit: WorkUnit, config: PrepareConfig, tally: Tally) -> Iterator[str]:
        compression = compression_of(unit.path)
        if compression is None:
            lines = read_range(unit).split(b"\n")
            if lines and not lines[-1]:
                lines.pop()
        else:
            lines = _lines(_decompressed_chunks(unit.path, compression))
        for number, line in enumerate(lines, start=unit.first_line):
            if number == 1 and line.startswith(BOM):
                line = line[len(BOM) :]
            text = _parse_line(line, unit.path, number, config.text_field, tally)
            if text is not None:
                yield text


def _after_newline(buf: bytes, at_eof: bool) -> int | None:
    del at_eof
    newline = buf.find(b"\n")
    return None if newline < 0 else newline + 1


def _parse_line(line: bytes, path: str, number: int, field: str, tally: Tally) -> str | None:
    if not line.strip():
        tally.count(BLANK_LINES)
        return None
    location = f"line {number}"
    try:
        record = json.loads(decode_utf8(line, tally))
    except json.JSONDecodeError as e:
        preview = hashlib.sha256(line).hexdigest()[:12]
        tally.reject(Reject(MALFORMED_JSON, path, location, f"{e.msg} (line sha256 {preview})"))
        return None
    if not isinstance(record, dict) or field not in record or record[field] is None:
        tally.reject(Reject(MISSING_TEXT, path, location, f"no {field!r} field"))
        return None
    text = record[field]
    if not isinstance(text, str):
        tally.reject(Reject(NON_STRING_TEXT, path, location, f"{field!r} is {type(text).__name__}"))
        return None
    if not text.strip():
        tally.skip(EMPTY)
        return None
    return text
