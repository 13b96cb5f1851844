"""Documents the quality filters keep with another text (datatrove's C4 filter drops lines), per
unit: written by the cleaning stage beside a unit's fingerprints, read by the tokenizing pass, so
that what is tokenized is what the filters kept and what was deduplicated, without running the
filters twice.

Written before the unit's fingerprints, whose file marks the unit done, so a unit read back after a
crash has its edits too. A cut document whose text changes is cut again, at the same size.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping

import zstandard

from pipeline.dataset import storage
from pipeline.prepare.read.documents import DocumentPiece, DocumentRun, Read, is_long, pieces_of
from pipeline.prepare.read.unit_documents import kept_numbered, with_languages
from schemas import formats

EDITS_DIR = "edits"


def edits_path(output_dir: str, unit: int) -> str:
    return storage.join(output_dir, formats.STATE_DIR, EDITS_DIR, f"{unit:05d}.json.zst")


def write_edits(output_dir: str, unit: int, edits: list[list]) -> None:
    """`[number, text]` of each changed document."""
    data = json.dumps(edits, ensure_ascii=False).encode("utf-8", "surrogatepass")
    storage.write_bytes_atomic(
        edits_path(output_dir, unit), zstandard.ZstdCompressor().compress(data)
    )


def read_edits(output_dir: str, unit: int) -> dict[int, str]:
    path = edits_path(output_dir, unit)
    if not storage.exists(path):
        return {}
    with storage.open_raw(path) as f:
        data = zstandard.ZstdDecompressor().decompressobj().decompress(f.read())
    return {number: text for number, text in json.loads(data.decode("utf-8", "surrogatepass"))}


def edited_documents(
    numbered: Iterable[tuple[int, Read]], edits: dict[int, str], limit: int
) -> Iterator[tuple[int, Read]]:
    """`numbered` (see `unit_documents`) with the changed documents' texts; a changed cut document
    is yielded once, whole or cut again at `limit` bytes, in place of its pieces."""
    for first, read in numbered:
        if not edits:
            yield first, read
        elif isinstance(read, DocumentPiece):
            if first not in edits:
                yield first, read
            elif read.first:
                yield from _cut_again(first, edits[first], read, limit)
        else:
            texts = [edits.get(number, text) for number, text in enumerate(read.texts, first)]
            yield first, DocumentRun(texts, read.locations, read.ids)


def to_tokenize(
    numbered: Iterable[tuple[int, Read]],
    edits: dict[int, str],
    removed: frozenset[int],
    language_of: Mapping[int, str],
    limit: int,
) -> Iterator[tuple[Read, list[str | None]]]:
    """`numbered` as the filters leave it, each read with its documents' languages: the changed
    texts in (see `edited_documents`), the removed documents out."""
    return with_languages(
        kept_numbered(edited_documents(numbered, edits, limit), removed), language_of
    )


def _cut_again(
    number: int, text: str, first: DocumentPiece, limit: int
) -> Iterator[tuple[int, Read]]:
    if not is_long(text, limit):
        ids = None if first.id is None else [first.id]
        yield number, DocumentRun([text], [first.location], ids)
        return
    for i, piece in enumerate(pieces_of(text.encode("utf-8", "surrogatepass"), limit)):
        yield (
            number,
            DocumentPiece(
                piece.decode("utf-8", "surrogatepass"),
                first=i == 0,
                location=first.location,
                id=first.id,
            ),
        )
