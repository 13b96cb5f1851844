"""Plain text: documents separated by a separator line, as TinyStories ships them."""

from __future__ import annotations

from collections.abc import Iterator

from pipeline.prepare.documents import EMPTY, Tally, decode_utf8
from pipeline.prepare.sources.base import plan_byte_ranges, read_range, separator_regex, split_at_separator_lines
from pipeline.prepare.units import WorkUnit
from schemas.manifest import InputInfo, PrepareConfig


class TextSource:
    """A document is the text between separator lines with surrounding whitespace stripped.

    Units are cut right after a separator line, so no document spans two units.
    """

    def fingerprint_and_plan(
        self, path: str, config: PrepareConfig
    ) -> tuple[InputInfo, list[WorkUnit]]:
        pattern = separator_regex(config.separator)

        def boundary_after(buf: bytes, at_eof: bool) -> int | None:
            # `buf` starts at a line start; the cut goes right after the separator's newline.
            match = pattern.search(b"\n" + buf + (b"\n" if at_eof else b""))
            return None if match is None else match.end()

        return plan_byte_ranges(path, "text", config, boundary_after)

    def read(self, unit: WorkUnit, config: PrepareConfig, tally: Tally) -> Iterator[str]:
        pieces = split_at_separator_lines(read_range(unit), config.separator)
        # What follows the last separator is a document only if it holds text: a file that
        # ends with a separator line has nothing after it, and that is no skipped document.
        last = pieces.pop()
        if last.strip():
            pieces.append(last)
        for piece in pieces:
            text = decode_utf8(piece, tally).strip()
            if text:
                yield text
            else:
                tally.skip(EMPTY)
