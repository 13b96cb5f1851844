"""What a work unit reads: documents, counted skips and rejects, as plain values.

Readers yield each document's text (a plain `str`: a unit holds tens of thousands of them) and
record what they skip, so every input byte is either a document, a counted skip, or a recorded
reject: nothing disappears silently.
"""

from __future__ import annotations

import collections
import dataclasses

# Skip reasons (manifest `skipped`) and counts (manifest `counts`).
EMPTY = "empty_document"
MALFORMED_JSON = "malformed_json"
MISSING_TEXT = "missing_text_field"
NON_STRING_TEXT = "non_string_text_field"
BAD_FILE = "unreadable_file"
INVALID_UTF8 = "invalid_utf8_documents"
BLANK_LINES = "blank_jsonl_lines"


@dataclasses.dataclass(frozen=True)
class Reject:
    """A piece of input that was not used, with where it came from, for `rejects.jsonl`."""

    reason: str
    path: str
    location: str
    detail: str

    def to_dict(self) -> dict[str, str]:
        return dataclasses.asdict(self)


class Tally:
    """Skip and event counters of one unit, kept apart so the manifest can report both."""

    def __init__(self) -> None:
        self.skipped: collections.Counter[str] = collections.Counter()
        self.counts: collections.Counter[str] = collections.Counter()
        self.rejects: list[Reject] = []

    def skip(self, reason: str) -> None:
        self.skipped[reason] += 1

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
