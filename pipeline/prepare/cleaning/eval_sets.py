"""The word n-grams of the eval examples a corpus is decontaminated against.

Eval sets are small beside a corpus, so every worker holds all their n-gram hashes (8 bytes per
n-gram) and checks each document against them where it reads it; no shuffle is needed. Examples are:
text files cut at the separator line (like text inputs); every string value of each JSONL object;
every string column of each Parquet row. An example shorter than the n-gram length cannot match.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from pipeline import storage
from pipeline.prepare.cleaning.fingerprints import ngram_hashes, word_hashes
from pipeline.prepare.sources.base import split_at_separator_lines

_CHUNK = 4 * 2**20


class EvalSetError(ValueError):
    """An eval file that cannot be read as one; the message names it and the fix."""


def file_sha256(path: str) -> str:
    digest = hashlib.sha256()
    with storage.open_raw(path) as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _examples(path: str, separator: str) -> Iterator[str]:
    name = path.lower()
    if name.endswith(".parquet"):
        with storage.open_raw(path) as f:
            table = pq.read_table(f)
        for column in table.columns:
            if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
                yield from (value for value in column.to_pylist() if value)
        return
    with storage.open_raw(path) as f:
        text = f.read().decode("utf-8", errors="replace")
    if name.endswith((".jsonl", ".json")):
        for number, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    record = json.loads(line)
                except json.JSONDecodeError as e:
                    raise EvalSetError(f"{path}: line {number} is not JSON ({e}); fix or remove the line") from None
                values = record.values() if isinstance(record, dict) else [record]
                yield from (v for v in values if isinstance(v, str))
        return
    yield from split_at_separator_lines(text, separator)


class EvalSet:
    """Sorted n-gram hashes of all eval files, each with the first file (in flag order) holding it."""

    def __init__(self, paths: tuple[str, ...], ngram: int, separator: str):
        per_file = []
        for index, path in enumerate(paths):
            hashes = [ngram_hashes(word_hashes(example), ngram) for example in _examples(path, separator)]
            unique = np.unique(np.concatenate(hashes)) if hashes else np.zeros(0, dtype=np.uint64)
            per_file.append((unique, np.full(len(unique), index, dtype=np.int32)))
        hashes = np.concatenate([h for h, _ in per_file] or [np.zeros(0, dtype=np.uint64)])
        files = np.concatenate([f for _, f in per_file] or [np.zeros(0, dtype=np.int32)])
        order = np.lexsort((files, hashes))
        hashes, files = hashes[order], files[order]
        first = np.ones(len(hashes), dtype=bool)
        first[1:] = hashes[1:] != hashes[:-1]
        self._hashes, self._files = hashes[first], files[first]
        self.ngram = ngram

    def match(self, words: np.ndarray) -> int | None:
        """The index of the first eval file sharing an n-gram with these words, or None."""
        grams = ngram_hashes(words, self.ngram)
        if not len(grams) or not len(self._hashes):
            return None
        at = np.minimum(np.searchsorted(self._hashes, grams), len(self._hashes) - 1)
        hit = self._hashes[at] == grams
        return int(self._files[at[hit]].min()) if hit.any() else None


@functools.cache
def eval_set(paths: tuple[str, ...], ngram: int, separator: str, digests: tuple[str, ...]) -> EvalSet:
    """Loaded once per worker process; refuses eval files changed since the launcher hashed them."""
    for path, expected in zip(paths, digests):
        if file_sha256(path) != expected:
            raise EvalSetError(
                f"{path} changed since this run started (sha256 {expected}); rerun to decontaminate against it as it is now"
            )
    return EvalSet(paths, ngram, separator)
