"""Input formats behind one interface, chosen by `--format` or by the input's name."""

from __future__ import annotations

import os

from pipeline import storage
from pipeline.prepare.sources.base import Source, SourceError
from pipeline.prepare.sources.hf import HuggingFaceSource
from pipeline.prepare.sources.jsonl import JsonlSource
from pipeline.prepare.sources.parquet import ParquetSource
from pipeline.prepare.sources.text import TextSource

SOURCES: dict[str, Source] = {
    "text": TextSource(),
    "jsonl": JsonlSource(),
    "parquet": ParquetSource(),
    "hf": HuggingFaceSource(),
}

_EXTENSIONS = {
    ".txt": "text",
    ".text": "text",
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".json": "jsonl",
    ".parquet": "parquet",
}


def detect_format(path: str) -> str:
    """The format an input's name implies; a directory is a Hugging Face dataset."""
    name = path[: -len(".gz")] if path.endswith(".gz") else path
    name = name[: -len(".zst")] if name.endswith(".zst") else name
    fmt = _EXTENSIONS.get(os.path.splitext(name)[1].lower())
    if fmt is None and storage.is_local(path) and os.path.isdir(path):
        fmt = "hf"
    if fmt is None:
        raise SourceError(
            f"cannot tell the format of {path!r} from its name; pass --format "
            f"({', '.join(SOURCES)})"
        )
    return fmt


def resolve_inputs(patterns: list[str], fmt: str | None) -> list[tuple[str, str]]:
    """(path, format) for every input, globs expanded and sorted, in the order given.

    With `--format hf` an input that is not a local path is taken as a hub id.
    """
    resolved = []
    for pattern in patterns:
        if fmt == "hf" and not (storage.is_local(pattern) and os.path.exists(pattern)):
            resolved.append((pattern, "hf"))
            continue
        if storage.is_local(pattern) and os.path.isdir(pattern):
            paths = [os.path.abspath(pattern)]
        else:
            paths = [os.path.abspath(p) if storage.is_local(p) else p for p in storage.match(pattern)]
        if not paths:
            raise SourceError(f"no input matches {pattern!r}")
        resolved.extend((p, fmt or detect_format(p)) for p in paths)
    seen = set()
    for path, _ in resolved:
        if path in seen:
            raise SourceError(f"input {path!r} is given twice; its documents would be duplicated")
        seen.add(path)
    return resolved


__all__ = ["SOURCES", "Source", "SourceError", "detect_format", "resolve_inputs"]
