"""Turning one work unit into its shards: read, tokenize, split, shuffle, pack, write, record.

Everything here depends only on the unit and the config, so any worker, on any runner, at any
time, writes the same bytes for the same unit. Documents are handled in batches of about
`unit_bytes` (one batch for most units), so a worker's memory stays bounded whatever the input's
shape. The unit record is written last: a unit without one is unfinished, whatever shards it may
have left behind.
"""

from __future__ import annotations

import collections
import functools
import hashlib
import json
import os
import platform
import resource
import time
from collections.abc import Iterator

import numpy as np

from pipeline.dataset import storage
from pipeline.prepare.clean.edits import read_edits, to_tokenize
from pipeline.prepare.clean.inline_filters import judged_documents, judges_while_tokenizing
from pipeline.prepare.clean.removals import cleans, is_cleaned, removed_numbers
from pipeline.prepare.clean.unit_fingerprints import read_fingerprints
from pipeline.prepare.execution.worker_environment import package_versions
from pipeline.prepare.read import SourceError
from pipeline.prepare.read.base import ContentDigest
from pipeline.prepare.read.documents import DocumentPiece, Read, Reject, Tally
from pipeline.prepare.read.unit_documents import numbered_documents
from pipeline.prepare.run_context import RunContext
from pipeline.prepare.units import (
    UnitResult,
    WorkUnit,
    check_unchanged,
    unit_record_name,
    unit_rejects_name,
)
from pipeline.prepare.write.shard_writer import ShardWriter
from pipeline.splitmix import splitmix64
from pipeline.tokenization import Tokenizer, load_tokenizer
from schemas import formats
from schemas.manifest import ShardInfo
from schemas.records import encode_record, numpy_dtype, record_bounds


def validation_mask(texts: list[str], fraction: float, seed: int) -> np.ndarray:
    """True for documents that go to validation, by a salted hash of their text.

    A document's split depends on its content alone, so it stays put when the corpus around it
    changes, and exact duplicates land in the same split.
    """
    if fraction <= 0.0:
        return np.zeros(len(texts), dtype=bool)
    salt = seed.to_bytes(8, "little", signed=True)
    threshold = int(fraction * 2**64)
    return np.fromiter(
        (
            int.from_bytes(
                hashlib.blake2b(
                    t.encode("utf-8", "surrogatepass"), digest_size=8, salt=salt
                ).digest(),
                "little",
            )
            < threshold
            for t in texts
        ),
        dtype=bool,
        count=len(texts),
    )


def shuffled_order(count: int, seed: int, unit_index: int, batch: int, split: str) -> np.ndarray:
    """A permutation keyed by stable hashes, so it is the same under any numpy version."""
    key = hashlib.blake2b(f"{seed}:{unit_index}:{batch}:{split}".encode(), digest_size=8).digest()
    keys = splitmix64(np.arange(count, dtype=np.uint64) ^ np.uint64(int.from_bytes(key, "little")))
    return np.argsort(keys, kind="stable")


class _SplitShards:
    """The unit's shard per split, opened when the split gets its first record."""

    def __init__(self, context: RunContext, unit: WorkUnit):
        self._context = context
        self._unit = unit
        self._writers: dict[str, ShardWriter] = {}
        self._documents: dict[str, int] = {}
        self._tokens: dict[str, int] = {}
        self.language_tokens: collections.Counter[str] = collections.Counter()

    def write(
        self, split: str, tokens: np.ndarray, lengths: list[int], languages: list[str | None]
    ) -> None:
        """`lengths` and `languages` per document (or piece) of `tokens`."""
        if split not in self._writers:
            relative = formats.shard_path(split, self._unit.index, self._context.num_units)
            self._writers[split] = ShardWriter(storage.join(self._context.output_dir, relative))
        writer = self._writers[split]
        bounds = record_bounds(lengths, self._context.config.record_tokens)
        for a, b in zip(bounds, bounds[1:]):
            writer.write(encode_record(tokens[a:b], self._context.dtype_name))
        self._documents[split] = self._documents.get(split, 0) + len(lengths)
        self._tokens[split] = self._tokens.get(split, 0) + len(tokens)
        for language, length in zip(languages, lengths):
            if language is not None:
                self.language_tokens[language] += length

    def close(self) -> tuple[ShardInfo, ...]:
        shards = []
        for split in formats.SPLITS:
            if split in self._writers:
                written = self._writers.pop(split).close()
                shards.append(
                    ShardInfo(
                        split=split,
                        path=formats.shard_path(split, self._unit.index, self._context.num_units),
                        unit=self._unit.index,
                        records=written.records,
                        documents=self._documents[split],
                        tokens=self._tokens[split],
                        bytes=written.bytes,
                        sha256=written.sha256,
                    )
                )
        return tuple(shards)

    def abort(self) -> None:
        for writer in self._writers.values():
            writer.abort()
        self._writers.clear()


class _UnitWriter:
    """Batches of documents to shards: split, shuffle within the batch, encode, pack."""

    def __init__(self, context: RunContext, unit: WorkUnit, tokenizer: Tokenizer):
        self._context = context
        self._config = context.config
        self._unit = unit
        self._tokenizer = tokenizer
        self._dtype = numpy_dtype(context.dtype_name)
        self.shards = _SplitShards(context, unit)
        self._batch: list[str] = []
        self._languages: list[str | None] = []  # the language of each of `_batch`
        self._batch_bytes = 0
        self._batches = 0
        self._piece_split = "train"

    def add(self, read: Read, languages: list[str | None]) -> None:
        """A run of whole documents, or one piece of a cut document (see `Source.read`), with the
        language of each (see `with_languages`)."""
        if isinstance(read, DocumentPiece):
            self._add_piece(read, languages[0])
            return
        self._batch += read.texts
        self._languages += languages
        self._batch_bytes += sum(map(len, read.texts))
        if self._batch_bytes >= self._config.unit_bytes:
            self.flush()

    def _add_piece(self, piece: DocumentPiece, language: str | None) -> None:
        """A cut document's pieces stay in order, each starting a record, all in the split of its
        first piece."""
        self.flush()
        if piece.first:
            to_validation = validation_mask(
                [piece.text], self._config.validation_fraction, self._config.seed
            )
            self._piece_split = "validation" if to_validation[0] else "train"
        if piece.text:
            tokens, lengths = self._tokenizer.encode_piece(piece.text, first=piece.first)
            self.shards.write(
                self._piece_split, tokens.astype(self._dtype), lengths.tolist(), [language]
            )

    def flush(self) -> None:
        if not self._batch:
            return
        texts, self._batch, self._batch_bytes = self._batch, [], 0
        languages, self._languages = self._languages, []
        to_validation = validation_mask(texts, self._config.validation_fraction, self._config.seed)
        for split, selected in (("train", ~to_validation), ("validation", to_validation)):
            indices = np.flatnonzero(selected)
            if len(indices):
                order = indices[
                    shuffled_order(
                        len(indices), self._config.seed, self._unit.index, self._batches, split
                    )
                ]
                picked = order.tolist()
                tokens, lengths = self._tokenizer.encode_documents([texts[i] for i in picked])
                # The dtype was chosen to hold every id of the vocabulary.
                self.shards.write(
                    split,
                    tokens.astype(self._dtype),
                    lengths.tolist(),
                    [languages[i] for i in picked],
                )
        self._batches += 1


_worker_versions = functools.cache(package_versions)


def _documents(
    unit: WorkUnit, context: RunContext, tally: Tally, digest: ContentDigest
) -> Iterator[tuple[Read, list[str | None]]]:
    """The unit's documents to tokenize, with their languages: judged by the filters as they are
    read, where this stage judges them, else without those the cleaning stage removed, with the
    texts it left and the languages its fingerprints hold."""
    config = context.config
    if judges_while_tokenizing(config) and not is_cleaned(context):
        return judged_documents(unit, context, tally, digest)
    removed = removed_numbers(context.output_dir, unit.index) if cleans(config) else frozenset()
    edits = read_edits(context.output_dir, unit.index) if config.filters else {}
    found = read_fingerprints(unit.index, context) if "language" in config.filters else None
    language_of = {number: language for number, language, *_ in found.languages} if found else {}
    return to_tokenize(
        numbered_documents(unit, config, tally, digest),
        edits,
        removed,
        language_of,
        config.max_document_bytes,
    )


def process_unit(unit: WorkUnit, context: RunContext) -> UnitResult:
    """Reads, tokenizes and writes one unit, then records it. Content errors raise SourceError,
    or, with `skip_bad_files`, skip the whole unit with a recorded reject."""
    started = time.perf_counter()
    config = context.config
    check_unchanged(unit)
    tally, digest = Tally(), ContentDigest()
    tokenizer = load_tokenizer(
        config.tokenizer, bos_token=config.bos_token, eos_token=config.eos_token
    )
    writer = _UnitWriter(context, unit, tokenizer)
    try:
        for read, languages in _documents(unit, context, tally, digest):
            writer.add(read, languages)
        writer.flush()
        shards = writer.shards.close()
    except SourceError as e:
        writer.shards.abort()
        if not config.skip_bad_files:
            raise
        # The whole unit is skipped and recorded: no partial file is taken as complete.
        tally = Tally()
        tally.reject(Reject(e.reason, unit.path, f"unit {unit.index}: {e}"))
        shards = ()
    except BaseException:
        writer.shards.abort()
        raise
    state = storage.join(context.output_dir, formats.STATE_DIR)
    if tally.rejects:
        lines = "".join(json.dumps(r.to_dict(), sort_keys=True) + "\n" for r in tally.rejects)
        storage.write_bytes_atomic(
            storage.join(state, formats.UNIT_REJECTS_DIR, unit_rejects_name(unit.index)),
            lines.encode(),
        )
    result = UnitResult(
        unit=unit.index,
        plan=context.plan,
        shards=shards,
        skipped=dict(sorted(tally.skipped.items())),
        language_tokens=dict(sorted(writer.shards.language_tokens.items())),
        counts=dict(sorted(tally.counts.items())),
        digest=digest.hexdigest(),
        newlines=digest.newlines,
        package_versions=_worker_versions(context.extras),
        seconds=time.perf_counter() - started,
        peak_rss_bytes=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        * 1024,  # Linux counts KiB
        worker=f"{platform.node()}:{os.getpid()}",
    )
    storage.write_bytes_atomic(
        storage.join(state, formats.UNITS_DIR, unit_record_name(unit.index)),
        result.to_json().encode(),
    )
    return result
