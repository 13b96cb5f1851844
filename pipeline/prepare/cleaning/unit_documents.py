"""A unit's documents, numbered: the one reading of a unit that every pass over it shares.

A document's number is its ordinal within its unit, in input order; a cut document counts once and
all its pieces carry its number. The fingerprint pass and the tokenizing pass both read units
through here, so a removal list written by the first names the same documents in the second.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from pipeline.prepare.documents import Document, DocumentPiece, Tally
from pipeline.prepare.sources import SOURCES
from pipeline.prepare.sources.base import ContentDigest
from pipeline.prepare.units import WorkUnit
from schemas.manifest import PrepareConfig


def numbered_documents(
    unit: WorkUnit, config: PrepareConfig, tally: Tally, digest: ContentDigest
) -> Iterator[tuple[int, list[Document]]]:
    """`(number of the first document, documents)` for each list the unit's source yields (see
    `Source.read`): a run of whole documents numbered on from the first, or one piece."""
    following = 0
    for documents in SOURCES[unit.format].read(unit, config, tally, digest):
        if not documents:
            continue
        if isinstance(documents[0], DocumentPiece):
            if documents[0].first:
                following += 1
            yield following - 1, documents
        else:
            yield following, documents
            following += len(documents)


def kept_documents(numbered: Iterable[tuple[int, list[Document]]], removed: frozenset[int]) -> Iterator[list[Document]]:
    """The lists of `numbered` without the documents whose numbers are in `removed`."""
    for first, documents in numbered:
        if not removed:
            yield documents
        elif isinstance(documents[0], DocumentPiece):
            if first not in removed:
                yield documents
        else:
            kept = [d for number, d in enumerate(documents, first) if number not in removed]
            if kept:
                yield kept
