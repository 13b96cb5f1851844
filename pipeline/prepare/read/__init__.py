"""Input formats behind one interface, chosen by `--format` or by the file's name."""

from __future__ import annotations

import os

from pipeline.prepare.read import hub_filesystem  # noqa: F401  (registers hf:// with Beam)
from pipeline.prepare.read.base import Source, SourceError
from pipeline.prepare.read.columnar import ArrowSource, ParquetSource
from pipeline.prepare.read.jsonl import JsonlSource
from pipeline.prepare.read.text import TextSource

SOURCES: dict[str, Source] = {
    "text": TextSource(),
    "jsonl": JsonlSource(),
    "parquet": ParquetSource(),
    "arrow": ArrowSource(),
}

_EXTENSIONS = {
    ".txt": "text",
    ".text": "text",
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".json": "jsonl",
    ".parquet": "parquet",
    ".arrow": "arrow",
}


def format_of_name(path: str) -> str | None:
    """The format a file's name implies (a `.gz`/`.zst` suffix aside), or None."""
    name = path.removesuffix(".gz").removesuffix(".zst")
    return _EXTENSIONS.get(os.path.splitext(name)[1].lower())


__all__ = ["SOURCES", "Source", "SourceError", "format_of_name"]
