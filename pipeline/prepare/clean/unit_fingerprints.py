"""The cleaning stage's first pass over a unit: its documents' fingerprints, kept per unit.

A unit's fingerprints are written atomically to the run's state directory, so a rerun after a crash
reads them instead of the input again. They hold what each document is compared by (its exact key,
its MinHash band keys), the eval n-grams it holds (decided upon only once every unit's are counted:
see `eval_matches`), and where it is in its input, to name it in `removals.jsonl`.

The quality filters run first, on each whole document (a cut one's pieces joined), a megabyte of
documents at a time, in order: a document they remove gets no fingerprint, so deduplication and
decontamination see only the documents kept. The first few each rule removes in a unit keep an
excerpt, for `--filter-dry-run` to show.
"""

from __future__ import annotations

import collections
import dataclasses
import io
import json
import os
from typing import Any

import numpy as np

from pipeline.dataset import storage
from pipeline.prepare.clean.decontamination.eval_sets import EvalSet, eval_set
from pipeline.prepare.clean.dedup.fingerprints import (
    ExactKey,
    MinHasher,
    NgramStream,
    exact_key,
    ngram_hashes,
    word_hashes,
)
from pipeline.prepare.clean.edits import write_edits
from pipeline.prepare.clean.judgments import PII_KINDS, TOO_LONG, Filters, Notes
from pipeline.prepare.read import SourceError
from pipeline.prepare.read.base import ContentDigest
from pipeline.prepare.read.documents import DocumentPiece, Read, Tally, is_long
from pipeline.prepare.read.unit_documents import numbered_documents
from pipeline.prepare.run_context import RunContext
from pipeline.prepare.units import WorkUnit, check_unchanged
from schemas import formats
from schemas.prepare_config import PrepareConfig

FINGERPRINTS_DIR = "fingerprints"
SAMPLES_PER_REASON = 3
SAMPLE_CHARS = 160
# Text handed to the quality filters at a time: a few hundred web documents, judged together (the
# fast filters' batch), and what a unit holds beyond one document while they wait.
JUDGED_CHARACTERS = 1 << 20
_JSON_FIELDS = ("ids", "filtered", "languages", "pii")
_NOT_ARRAYS = (*_JSON_FIELDS, "edits")


@dataclasses.dataclass(frozen=True)
class UnitFingerprints:
    """Per document number: `locations` (see `documents`) and `ids` (the id field's values, JSON
    values, or None). `exact_keys` are 16-byte keys as two uint64 columns, `near_keys` one band key
    per column. A document's eval n-grams are `eval_hits[eval_offsets[i]:eval_offsets[i + 1]]`
    (their indices in the `EvalSet`), with the first file holding each in `eval_files`, for the
    `i`-th of `eval_numbers`. `filtered` lists `[number, reason, excerpt or None]` of each document
    the quality filters removed. `languages` lists `[number, language, score, bytes]` of each
    document the language filter judged, kept or not (its UTF-8 bytes as judged); `pii` counts
    PII's replacements (`emails`, `ips`) and the `documents` they were made in."""

    unit: int
    documents: int
    locations: np.ndarray
    ids: list[Any] | None
    exact_numbers: np.ndarray
    exact_keys: np.ndarray
    near_numbers: np.ndarray
    near_keys: np.ndarray
    eval_numbers: np.ndarray
    eval_offsets: np.ndarray
    eval_hits: np.ndarray
    eval_files: np.ndarray
    filtered: list = dataclasses.field(default_factory=list)
    languages: list = dataclasses.field(default_factory=list)
    pii: dict = dataclasses.field(default_factory=dict)
    edits: list = dataclasses.field(
        default_factory=list
    )  # `[number, text]`, written apart (see `edits`)

    def to_bytes(self, key: str) -> bytes:
        arrays = {
            f.name: np.asarray(getattr(self, f.name))
            for f in dataclasses.fields(self)
            if f.name not in _NOT_ARRAYS
        }
        texts = {name: np.array(json.dumps(getattr(self, name))) for name in _JSON_FIELDS}
        out = io.BytesIO()
        np.savez(out, key=np.array(key), **texts, **arrays)
        return out.getvalue()

    @classmethod
    def from_bytes(cls, data: bytes, key: str) -> UnitFingerprints | None:
        """None for fingerprints made under another key (another plan)."""
        with np.load(io.BytesIO(data)) as arrays:
            if str(arrays["key"]) != key:
                return None
            values = {
                f.name: arrays[f.name] for f in dataclasses.fields(cls) if f.name not in _NOT_ARRAYS
            }
            texts = {name: json.loads(str(arrays[name])) for name in _JSON_FIELDS}
        return cls(
            **{
                **values,
                **texts,
                "unit": int(values["unit"]),
                "documents": int(values["documents"]),
            }
        )

    def eval_counts(self) -> tuple[np.ndarray, np.ndarray]:
        """The eval n-grams these documents hold, and in how many documents each."""
        return np.unique(self.eval_hits, return_counts=True)

    def hits_of(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        """The eval n-grams of the `i`-th of `eval_numbers`, and the first file holding each."""
        span = slice(int(self.eval_offsets[i]), int(self.eval_offsets[i + 1]))
        return self.eval_hits[span], self.eval_files[span]


def fingerprints_path(output_dir: str, unit: int) -> str:
    return storage.join(output_dir, formats.STATE_DIR, FINGERPRINTS_DIR, f"{unit:05d}.npz")


def fingerprinted_units(output_dir: str) -> set[int]:
    """The units whose fingerprints are written, from a listing alone."""
    directory = storage.join(output_dir, formats.STATE_DIR, FINGERPRINTS_DIR)
    return {int(os.path.basename(p).split(".")[0]) for p in storage.list_files(directory, ".npz")}


def _json_value(value: Any) -> Any:
    """An id as JSON writes it: scalars as they are, anything else (bytes, dates) as text."""
    return value if value is None or isinstance(value, (str, int, float, bool)) else str(value)


class _Cut:
    """What is gathered of a cut document, piece by piece."""

    def __init__(self, minhasher: MinHasher | None, evals: EvalSet | None):
        self.exact = ExactKey()
        self.signature = minhasher.empty() if minhasher else None
        self.near = NgramStream(minhasher.ngram) if minhasher else None
        self.evals = NgramStream(evals.ngram) if evals else None
        self.hits: list[np.ndarray] = []
        self.texts: list[str] | None = []  # for the filters; None once past their bound
        self.bytes = 0


class Collector:
    """What a pass over a unit's documents gathers of them, read by read (`add`): the filters'
    judgments, then each kept document's fingerprints."""

    def __init__(
        self, config: PrepareConfig, evals: EvalSet | None, filters: Filters | None = None
    ):
        self._exact = config.dedup != "none"
        self._minhasher = (
            MinHasher(config.near_ngram, config.near_bands, config.near_rows)
            if config.dedup == "near"
            else None
        )
        self._evals = evals
        self._filters = filters
        self._filter_bytes = config.filter_max_document_bytes
        self.filtered: list[list] = []
        self.languages: list[list] = []
        self.pii: collections.Counter[str] = collections.Counter()
        self.edits: list[list] = []
        self._samples: dict[str, int] = {}
        self.locations: list[int] = []
        self.ids: list[Any] = []
        self.exact: list[tuple[int, bytes]] = []
        self.near: list[tuple[int, np.ndarray]] = []
        self.hits: list[tuple[int, np.ndarray]] = []
        self._cut: tuple[int, _Cut] | None = None
        # Documents waiting for the filters, in order: number, text (None: too long to hold whole),
        # and for a cut document what its pieces gave.
        self._waiting: list[tuple[int, str | None, _Cut | None]] = []
        self._waiting_characters = 0

    def _where(self, number: int, location: int, id: Any) -> None:
        if number == len(self.locations):
            self.locations.append(location)
            self.ids.append(_json_value(id))

    def _wait(self, number: int, text: str | None, cut: _Cut | None) -> None:
        self._waiting.append((number, text, cut))
        self._waiting_characters += len(text or "")
        if self._waiting_characters >= JUDGED_CHARACTERS:
            self.judge_waiting()

    def judge_waiting(self) -> None:
        """The waiting documents judged in one call of the filters, then, in order, each removal
        recorded and each kept document fingerprinted (a changed text kept in `edits`)."""
        waiting, self._waiting, self._waiting_characters = self._waiting, [], 0
        texts = [text for _, text, _ in waiting if text is not None]
        judgments, notes = self._filters.judge_noted(texts) if texts else ([], [])
        judged, noted = iter(judgments), iter(notes)
        for number, text, cut in waiting:
            reason, kept = (TOO_LONG, "") if text is None else next(judged)
            if text is not None:
                self._note(number, next(noted), text)
            if reason is not None:
                self._removed(number, reason, text)
            elif (
                kept != text or cut is None
            ):  # a cut document's pieces gave what its text kept gives
                if kept != text:
                    self.edits.append([number, kept])
                self._fingerprint(number, kept)
            else:
                self._cut_fingerprint(number, cut)

    def _note(self, number: int, notes: Notes, text: str) -> None:
        if "language" in notes:
            size = len(text.encode("utf-8", "surrogatepass"))
            self.languages.append([number, notes["language"], notes["language_score"], size])
        replaced = {kind: notes[kind] for kind in PII_KINDS if kind in notes}
        if replaced:
            self.pii.update(replaced, documents=1)

    def _removed(self, number: int, reason: str, text: str | None) -> None:
        sampled = self._samples.get(reason, 0)
        self._samples[reason] = sampled + 1
        excerpt = text[:SAMPLE_CHARS] if text is not None and sampled < SAMPLES_PER_REASON else None
        self.filtered.append([number, reason, excerpt])

    def add(self, first: int, read: Read) -> None:
        """A run of whole documents from number `first`, or a piece of cut document `first`."""
        if isinstance(read, DocumentPiece):
            self.piece(first, read)
            return
        self.end_cut()
        ids = read.ids or [None] * len(read.texts)  # a text file's documents have none
        for number, (text, location, id) in enumerate(zip(read.texts, read.locations, ids), first):
            self.whole(number, text, location, id)

    def cut_too_long(self) -> bool:
        """Whether the cut document being read is past the filters' bound: removed, whatever its
        next pieces hold."""
        return self._cut is not None and self._filters is not None and self._cut[1].texts is None

    @property
    def cutting(self) -> bool:
        return self._cut is not None

    def whole(self, number: int, text: str, location: int, id: Any) -> None:
        self._where(number, location, id)
        if self._filters is None:
            self._fingerprint(number, text)
        else:
            self._wait(number, None if is_long(text, self._filter_bytes) else text, None)

    def _fingerprint(self, number: int, text: str) -> None:
        if self._exact:
            self.exact.append((number, exact_key(text)))
        if self._minhasher is None and self._evals is None:
            return
        words = word_hashes(text)
        if self._minhasher is not None:
            signature = self._minhasher.signature(words)
            if signature is not None:
                self.near.append((number, signature))
        if self._evals is not None:
            hits = self._evals.hits(ngram_hashes(words, self._evals.ngram))
            if len(hits):
                self.hits.append((number, hits))

    def piece(self, number: int, piece: DocumentPiece) -> None:
        """A cut document is compared whole: its exact key, its shingles and its eval n-grams run
        on across its pieces."""
        if piece.first:
            self.end_cut()
            self._where(number, piece.location, piece.id)
            self._cut = (number, _Cut(self._minhasher, self._evals))
        cut = self._cut[1]
        if self._filters is not None and cut.texts is not None:
            cut.bytes += len(piece.text.encode("utf-8", "surrogatepass"))
            if cut.bytes <= self._filter_bytes:
                cut.texts.append(piece.text)
            else:
                cut.texts = None
        cut.exact.update(piece.text)
        if cut.near is None and cut.evals is None:
            return
        words = word_hashes(piece.text)
        if cut.near is not None:
            self._minhasher.update(cut.signature, cut.near.update(words))
        if cut.evals is not None:
            cut.hits.append(self._evals.hits(cut.evals.update(words)))

    def end_cut(self) -> None:
        if self._cut is None:
            return
        number, cut = self._cut
        self._cut = None
        if self._filters is None:
            self._cut_fingerprint(number, cut)
            return
        whole = None if cut.texts is None else "".join(cut.texts)
        cut.texts = None
        self._wait(number, whole, cut)

    def _cut_fingerprint(self, number: int, cut: _Cut) -> None:
        if self._exact:
            self.exact.append((number, cut.exact.digest()))
        if cut.near is not None and cut.near.words >= self._minhasher.ngram:
            self.near.append((number, cut.signature))
        if cut.hits:
            hits = np.unique(np.concatenate(cut.hits))
            if len(hits):
                self.hits.append((number, hits))

    def fingerprints(self, unit: int) -> UnitFingerprints:
        self.judge_waiting()
        hashes = self._minhasher.bands * self._minhasher.rows if self._minhasher else 0
        signatures = np.array([s for _, s in self.near], dtype=np.uint32).reshape(
            len(self.near), hashes
        )
        hits = [h for _, h in self.hits]
        all_hits = np.concatenate(hits) if hits else np.zeros(0, dtype=np.int64)
        return UnitFingerprints(
            unit=unit,
            documents=len(self.locations),
            locations=np.array(self.locations, dtype=np.int64),
            ids=self.ids if any(i is not None for i in self.ids) else None,
            exact_numbers=np.array([n for n, _ in self.exact], dtype=np.int64),
            exact_keys=np.frombuffer(b"".join(k for _, k in self.exact), dtype=np.uint64)
            .reshape(-1, 2)
            .copy(),
            near_numbers=np.array([n for n, _ in self.near], dtype=np.int64),
            near_keys=self._minhasher.band_keys(signatures)
            if self._minhasher
            else np.zeros((0, 0), dtype=np.uint64),
            eval_numbers=np.array([n for n, _ in self.hits], dtype=np.int64),
            eval_offsets=np.concatenate(([0], np.cumsum([len(h) for h in hits], dtype=np.int64))),
            eval_hits=all_hits,
            eval_files=self._evals.files[all_hits].astype(np.int64)
            if self._evals
            else np.zeros(0, dtype=np.int64),
            filtered=self.filtered,
            languages=self.languages,
            pii=dict(sorted(self.pii.items())),
            edits=self.edits,
        )


def fingerprint_unit(
    unit: WorkUnit, config: PrepareConfig, evals: EvalSet | None, filters: Filters | None = None
) -> UnitFingerprints:
    """Reads the unit through `numbered_documents`. A bad unit with `skip_bad_files` has no
    documents (the tokenizing pass skips and records it); otherwise its SourceError is raised."""
    collector = Collector(config, evals, filters)
    try:
        for first, read in numbered_documents(unit, config, Tally(), ContentDigest(), located=True):
            collector.add(first, read)
        collector.end_cut()
    except SourceError:
        if not config.skip_bad_files:
            raise
        collector = Collector(config, evals, filters)
    return collector.fingerprints(unit.index)


def fingerprints_key(context: RunContext) -> str:
    """What a unit's fingerprints depend on: the plan (config, inputs, eval files' contents)."""
    return context.plan


def read_fingerprints(unit: int, context: RunContext) -> UnitFingerprints | None:
    """A unit's fingerprints as this run's cleaning stage wrote them; None where there are none."""
    path = fingerprints_path(context.output_dir, unit)
    if not storage.exists(path):
        return None
    with storage.open_raw(path) as f:
        return UnitFingerprints.from_bytes(f.read(), fingerprints_key(context))


def unit_fingerprints(
    unit: WorkUnit, context: RunContext, filters: Filters | None = None
) -> UnitFingerprints:
    """The unit's fingerprints, from an earlier run's file when there is one, else made and kept;
    `filters` are the run's quality filters (None when it has none)."""
    found = read_fingerprints(unit.index, context)
    if found is not None:
        return found
    check_unchanged(unit)
    config = context.config
    evals = (
        eval_set(
            tuple(config.decontaminate),
            config.decontaminate_ngram,
            config.separator,
            context.eval_digests,
        )
        if config.decontaminate
        else None
    )
    fingerprints = fingerprint_unit(unit, config, evals, filters)
    if filters is not None:
        write_edits(context.output_dir, unit.index, fingerprints.edits)
    storage.write_bytes_atomic(
        fingerprints_path(context.output_dir, unit.index),
        fingerprints.to_bytes(fingerprints_key(context)),
    )
    return fingerprints
