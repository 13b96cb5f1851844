"""The cleaning stage's first pass over a unit: its documents' fingerprints, kept per unit.

A unit's fingerprints are written atomically to the run's state directory, so a rerun after a crash
reads them instead of the input again. Contaminated documents are found here, against eval sets
every worker holds; they take no part in deduplication, so a duplicate's keeper is never a document
that is removed anyway for contamination.
"""

from __future__ import annotations

import dataclasses
import io

import numpy as np

from pipeline import storage
from pipeline.prepare.cleaning.eval_sets import eval_set
from pipeline.prepare.cleaning.fingerprints import BANDS, ROWS, ExactKey, band_keys, exact_key, minhash, word_hashes
from pipeline.prepare.cleaning.unit_documents import numbered_documents
from pipeline.prepare.documents import DocumentPiece, Tally
from pipeline.prepare.sources import SourceError
from pipeline.prepare.sources.base import ContentDigest
from pipeline.prepare.units import WorkUnit
from schemas import formats
from schemas.manifest import PrepareConfig

FINGERPRINTS_DIR = "fingerprints"


@dataclasses.dataclass(frozen=True)
class UnitFingerprints:
    """`exact_keys` are 16-byte keys as two uint64 columns; `near_keys` one band key per column."""

    unit: int
    documents: int
    exact_numbers: np.ndarray
    exact_keys: np.ndarray
    near_numbers: np.ndarray
    near_keys: np.ndarray
    contaminated_numbers: np.ndarray
    contaminated_files: np.ndarray

    def to_bytes(self, key: str) -> bytes:
        out = io.BytesIO()
        np.savez(out, key=np.array(key), **{f.name: np.asarray(getattr(self, f.name)) for f in dataclasses.fields(self)})
        return out.getvalue()

    @classmethod
    def from_bytes(cls, data: bytes, key: str) -> UnitFingerprints | None:
        """None for fingerprints made under another key (other eval files)."""
        with np.load(io.BytesIO(data)) as arrays:
            if str(arrays["key"]) != key:
                return None
            values = {f.name: arrays[f.name] for f in dataclasses.fields(cls)}
        return cls(**{**values, "unit": int(values["unit"]), "documents": int(values["documents"])})


def fingerprints_path(output_dir: str, unit: int) -> str:
    return storage.join(output_dir, formats.STATE_DIR, FINGERPRINTS_DIR, f"{unit:05d}.npz")


class _Collector:
    def __init__(self, config: PrepareConfig, eval_digests: tuple[str, ...]):
        self._near = config.dedup == "near"
        self._evals = (
            eval_set(tuple(config.decontaminate), config.decontaminate_ngram, config.separator, eval_digests)
            if config.decontaminate
            else None
        )
        self.exact: list[tuple[int, bytes]] = []
        self.near: list[tuple[int, np.ndarray]] = []
        self.contaminated: list[tuple[int, int]] = []
        self._cut: tuple[int, ExactKey] | None = None
        self._cut_file: int | None = None

    def whole(self, number: int, text: str) -> None:
        words = word_hashes(text) if self._near or self._evals else None
        found = self._evals.match(words) if self._evals else None
        if found is not None:
            self.contaminated.append((number, found))
            return
        self.exact.append((number, exact_key(text)))
        if self._near:
            self.near.append((number, minhash(words)))

    def piece(self, number: int, piece: DocumentPiece) -> None:
        """A cut document takes part in exact deduplication and decontamination (n-grams within
        each piece); MinHash of a document too long to hold whole is not computed."""
        if piece.first:
            self.end_cut()
            self._cut, self._cut_file = (number, ExactKey()), None
        self._cut[1].update(piece.text)
        if self._evals and self._cut_file is None:
            self._cut_file = self._evals.match(word_hashes(piece.text))

    def end_cut(self) -> None:
        if self._cut is not None:
            number, key = self._cut
            if self._cut_file is not None:
                self.contaminated.append((number, self._cut_file))
            else:
                self.exact.append((number, key.digest()))
            self._cut = None


def _array(values: list, dtype, shape: tuple[int, ...] = ()) -> np.ndarray:
    return np.array(values, dtype=dtype).reshape((len(values), *shape))


def fingerprint_unit(unit: WorkUnit, config: PrepareConfig, eval_digests: tuple[str, ...]) -> UnitFingerprints:
    """Reads the unit through `numbered_documents`. A bad unit with `skip_bad_files` has no
    documents (the tokenizing pass skips and records it); otherwise its SourceError is raised."""
    collector = _Collector(config, eval_digests)
    documents = 0
    try:
        for first, run in numbered_documents(unit, config, Tally(), ContentDigest()):
            if isinstance(run[0], DocumentPiece):
                collector.piece(first, run[0])
                documents = first + 1
                continue
            collector.end_cut()
            for number, text in enumerate(run, first):
                collector.whole(number, text)
            documents = first + len(run)
        collector.end_cut()
    except SourceError:
        if not config.skip_bad_files:
            raise
        collector, documents = _Collector(config, eval_digests), 0
    exact = b"".join(key for _, key in collector.exact)
    signatures = _array([s for _, s in collector.near], np.uint32, (BANDS * ROWS,))
    return UnitFingerprints(
        unit=unit.index,
        documents=documents,
        exact_numbers=_array([n for n, _ in collector.exact], np.int64),
        exact_keys=np.frombuffer(exact, dtype=np.uint64).reshape(-1, 2).copy(),
        near_numbers=_array([n for n, _ in collector.near], np.int64),
        near_keys=band_keys(signatures),
        contaminated_numbers=_array([n for n, _ in collector.contaminated], np.int64),
        contaminated_files=_array([f for _, f in collector.contaminated], np.int64),
    )
