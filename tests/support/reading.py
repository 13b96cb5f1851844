"""A file read unit by unit, as prepare's workers read it, without a run."""

from __future__ import annotations

import os

from pipeline.dataset.storage import FileInfo
from pipeline.prepare.read import SOURCES
from pipeline.prepare.read.base import ContentDigest
from pipeline.prepare.read.documents import DocumentPiece, Tally
from pipeline.prepare.units import WorkUnit
from schemas.prepare_config import PrepareConfig


def read_all(path: str, fmt: str, config: PrepareConfig) -> tuple[list, Tally, list[str]]:
    """Every unit of the file read in turn: documents (pieces of one document joined), the tally,
    and the units' digests."""
    size = os.path.getsize(path)
    source = SOURCES[fmt]
    documents, tally, digests = [], Tally(), []
    for i, (start, end) in enumerate(source.plan(path, FileInfo(size, "v"), config)):
        digest = ContentDigest()
        for read in source.read(
            WorkUnit(i, 0, path, fmt, start, end, size, "v"), config, tally, digest, located=True
        ):
            if isinstance(read, DocumentPiece):
                assert len(read.text.encode()) <= config.max_document_bytes
                if read.first:
                    documents.append([])
                documents[-1].append(read.text)
            else:
                assert len(read.texts) == len(read.locations)
                documents += read.texts
        digests.append(digest.hexdigest())
    return ["".join(d) if isinstance(d, list) else d for d in documents], tally, digests


def config(unit_bytes: int, max_document_bytes: int = 2**20) -> PrepareConfig:
    # Below the config's own minimum, to cut a small file into many units.
    cfg = PrepareConfig(max_document_bytes=max_document_bytes)
    object.__setattr__(cfg, "unit_bytes", unit_bytes)
    return cfg
