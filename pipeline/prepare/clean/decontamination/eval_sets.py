"""The word n-grams of the eval examples a corpus is decontaminated against.

Eval sets are small beside a corpus, so every worker holds all their n-gram hashes (8 bytes per
n-gram) and looks each document's n-grams up where it reads it; no shuffle is needed for that.

Examples are every string in a file, however it nests them: each string value of a JSON Lines
record or of a JSON document (an array of records, or an object holding them), inside lists and
objects at any depth (MMLU's `{"question": ..., "choices": [...]}` gives the question and each
choice); each string of each Parquet row, nested columns included; and for any other file, its text
cut at separator lines, as text inputs are. `.gz` and `.zst` files are read decompressed. The input
readers (pipeline/prepare/read/) read them: JSON Lines split at "\n" alone, compressed data and
Parquet files checked, and errors located, as for inputs. A file with no example, or none as long as
the n-gram, could never match, so it is refused.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import io
import json
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

from pipeline.dataset import storage
from pipeline.prepare.clean.dedup.fingerprints import ngram_hashes, word_hashes, words
from pipeline.prepare.read.base import BOM, ContentDigest, SourceError, split_at_separator_lines
from pipeline.prepare.read.columnar import parquet_rows
from pipeline.prepare.read.jsonl import compression_of, file_chunks, file_lines
from schemas.errors import RunError
from schemas.prepare_config import DEFAULT_MAX_DOCUMENT_BYTES

_CHUNK = 4 * 2**20
# A JSON Lines line this long is refused unparsed, as an input's is at the default
# --max-document-bytes.
_LINE_LIMIT = 4 * DEFAULT_MAX_DOCUMENT_BYTES


class EvalSetError(RunError, ValueError):
    """An eval file that cannot be read as one; the message names it and the fix."""


def file_sha256(path: str) -> str:
    digest = hashlib.sha256()
    with storage.open_raw(path) as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _strings(value: Any) -> Iterator[str]:
    """Every string in a value of JSON's (or Arrow's Python) shape, in order, at any depth."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _strings(item)


def _json_lines(path: str, lines: Iterable[tuple[int, bytes | None]]) -> Iterator[str]:
    for number, line in lines:
        if line is None:
            raise EvalSetError(
                f"{path}: line {number} is longer than {_LINE_LIMIT} bytes; is it JSON Lines?"
            )
        if line.strip():
            try:
                yield from _strings(json.loads(line.decode("utf-8", errors="replace")))
            except json.JSONDecodeError as e:
                raise EvalSetError(
                    f"{path}: line {number} is not JSON ({e}); fix or remove the line"
                ) from None


def _examples(path: str, separator: str) -> Iterator[str]:
    name = path.lower().removesuffix(".gz").removesuffix(".zst")
    if name.endswith((".jsonl", ".ndjson")):
        yield from _json_lines(path, file_lines(path, _LINE_LIMIT))
        return
    with storage.open_raw(path) as f:
        if name.endswith(".parquet"):
            compressed = compression_of(path) is not None
            for row in parquet_rows(
                io.BytesIO(b"".join(file_chunks(f, path, ContentDigest()))) if compressed else f,
                path,
            ):
                yield from _strings(row)
            return
        data = b"".join(file_chunks(f, path, ContentDigest())).removeprefix(BOM)
    text = data.decode("utf-8", errors="replace")
    if name.endswith(".json"):
        try:
            document = json.loads(text)
        except json.JSONDecodeError:
            yield from _json_lines(
                path, file_lines(path, _LINE_LIMIT)
            )  # JSON Lines under a .json name, as many are
        else:
            yield from _strings(document)
    else:
        yield from (piece.strip() for piece in split_at_separator_lines(text, separator))


def examples(path: str, separator: str) -> Iterator[str]:
    """The file's examples (see the module's docstring); the name, less `.gz`/`.zst`, says the
    format. The input readers read it (pipeline/prepare/read/): lines, compression and errors as
    for inputs."""
    try:
        yield from _examples(path, separator)
    except SourceError as e:
        raise EvalSetError(str(e)) from None


@dataclasses.dataclass(frozen=True)
class EvalFileStats:
    examples: int
    ngrams: int  # distinct n-grams


def _file_ngrams(path: str, ngram: int, separator: str) -> tuple[np.ndarray, EvalFileStats]:
    """The file's distinct n-gram hashes, sorted; refuses a file none of whose examples can
    match."""
    hashes, count = [], 0
    for example in examples(path, separator):
        if example.strip():
            count += 1
            hashes.append(ngram_hashes(word_hashes(example), ngram))
    unique = np.unique(np.concatenate(hashes)) if hashes else np.zeros(0, dtype=np.uint64)
    if not count:
        raise EvalSetError(
            f"{path}: no eval example in it (no string in a JSON or Parquet file, no text in a "
            "text file); check the file, or its name's suffix, which says how it is read"
        )
    if not len(unique):
        raise EvalSetError(
            f"{path}: none of its {count} examples has {ngram} words, so none can match; "
            "lower --decontaminate-ngram or drop the file"
        )
    return unique, EvalFileStats(count, len(unique))


class EvalSet:
    """The n-gram hashes of all eval files, sorted, each with the first file (in flag order) that
    holds it; an n-gram is named by its index here."""

    def __init__(self, paths: tuple[str, ...], ngram: int, separator: str):
        per_file = [_file_ngrams(path, ngram, separator) for path in paths]
        self.stats = tuple(stats for _, stats in per_file)
        hashes = np.concatenate([h for h, _ in per_file] or [np.zeros(0, dtype=np.uint64)])
        files = np.concatenate(
            [np.full(len(h), i, dtype=np.int32) for i, (h, _) in enumerate(per_file)]
            or [np.zeros(0, np.int32)]
        )
        order = np.lexsort((files, hashes))
        hashes, files = hashes[order], files[order]
        first = np.ones(len(hashes), dtype=bool)
        first[1:] = hashes[1:] != hashes[:-1]
        self.hashes, self.files = hashes[first], files[first]
        self.ngram = ngram

    def __len__(self) -> int:
        return len(self.hashes)

    def hits(self, ngrams: np.ndarray) -> np.ndarray:
        """The indices of the eval n-grams among these n-gram hashes, each once, sorted."""
        if not len(ngrams) or not len(self.hashes):
            return np.zeros(0, dtype=np.int64)
        at = np.minimum(np.searchsorted(self.hashes, ngrams), len(self.hashes) - 1)
        return np.unique(at[self.hashes[at] == ngrams]).astype(np.int64)


@functools.cache
def eval_set(
    paths: tuple[str, ...], ngram: int, separator: str, digests: tuple[str, ...]
) -> EvalSet:
    """Loaded once per worker process; refuses eval files changed since the launcher hashed them."""
    for path, expected in zip(paths, digests):
        if file_sha256(path) != expected:
            raise EvalSetError(
                f"{path} changed since this run started (sha256 {expected}); rerun to "
                "decontaminate against it as it is now"
            )
    return EvalSet(paths, ngram, separator)


def ngram_texts(
    paths: tuple[str, ...], ngram: int, separator: str, wanted: set[int]
) -> dict[int, str]:
    """The words of the eval n-grams whose hashes are `wanted` (as they are compared: case-folded),
    from their first occurrence in the files."""
    found: dict[int, str] = {}
    for path in paths:
        for example in examples(path, separator):
            hashes = ngram_hashes(word_hashes(example), ngram)
            missing = np.flatnonzero(np.isin(hashes, list(wanted - found.keys())))
            if len(missing):
                listed = words(example)
                for at in missing.tolist():
                    found.setdefault(int(hashes[at]), " ".join(listed[at : at + ngram]))
            if len(found) == len(wanted):
                return found
    return found
