"""A unit's documents, numbered: the one reading of a unit that every pass over it shares.

A document's number is its ordinal within its unit, in input order; a cut document counts once and
all its pieces carry its number. The fingerprint pass and the tokenizing pass both read units
through here, so a removal list written by the first names the same documents in the second.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping

from pipeline.prepare.read import SOURCES
from pipeline.prepare.read.base import ContentDigest
from pipeline.prepare.read.documents import DocumentPiece, DocumentRun, Read, Tally
from pipeline.prepare.units import WorkUnit
from schemas.prepare_config import PrepareConfig


def numbered_documents(
    unit: WorkUnit,
    config: PrepareConfig,
    tally: Tally,
    digest: ContentDigest,
    *,
    located: bool = False,
) -> Iterator[tuple[int, Read]]:
    """`(number of the first document, what was read)` for each run of whole documents or piece of
    a cut one the unit's source yields (see `Source.read`)."""
    following = 0
    for read in SOURCES[unit.format].read(unit, config, tally, digest, located=located):
        if isinstance(read, DocumentPiece):
            if read.first:
                following += 1
            yield following - 1, read
        else:
            yield following, read
            following += len(read.texts)


def kept_numbered(
    numbered: Iterable[tuple[int, Read]], removed: frozenset[int]
) -> Iterator[tuple[list[int], Read]]:
    """What `numbered` read, without the documents whose numbers are in `removed`, each read with
    the numbers of its documents (a piece, its document's)."""
    for first, read in numbered:
        if isinstance(read, DocumentPiece):
            if first not in removed:
                yield [first], read
        elif not removed:
            yield list(range(first, first + len(read.texts))), read
        else:
            kept = [i for i in range(len(read.texts)) if first + i not in removed]
            if kept:
                yield (
                    [first + i for i in kept],
                    DocumentRun(
                        *(_picked(v, kept) for v in (read.texts, read.locations, read.ids))
                    ),
                )


def with_languages(
    numbered: Iterable[tuple[list[int], Read]], language_of: Mapping[int, str]
) -> Iterator[tuple[Read, list[str | None]]]:
    """Each read with its documents' languages (None where the language filter judged none)."""
    for numbers, read in numbered:
        yield read, [language_of.get(number) for number in numbers]


def _picked(values: list | None, kept: list[int]) -> list | None:
    return None if values is None else [values[i] for i in kept]
