"""Decontamination's decision: in how many documents each eval n-gram is, which of them are common
text, and which documents hold one that is not.

Contamination is decided only once every document's eval n-grams are counted: an n-gram found in
more than `decontaminate_max_matches` documents is common text (a licence, a page footer), not a
leak, and removes nothing. The counts are kept in the state directory for the run's report of the
common n-grams (`report`).
"""

from __future__ import annotations

import io

import numpy as np

from pipeline.dataset import storage
from pipeline.prepare.clean.unit_fingerprints import UnitFingerprints
from schemas import formats

EVAL_MATCHES_NAME = "eval_matches.npz"


def eval_matches_path(output_dir: str) -> str:
    return storage.join(output_dir, formats.STATE_DIR, EVAL_MATCHES_NAME)


def add_counts(parts: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """`(indices, counts)` parts summed per index."""
    indices = np.concatenate([i for i, _ in parts] or [np.zeros(0, dtype=np.int64)])
    counts = np.concatenate([c for _, c in parts] or [np.zeros(0, dtype=np.int64)])
    unique, inverse = np.unique(indices, return_inverse=True)
    return unique.astype(np.int64), np.bincount(
        inverse, weights=counts, minlength=len(unique)
    ).astype(np.int64)


def write_eval_matches(output_dir: str, total: tuple[np.ndarray, np.ndarray]) -> None:
    """Every matched eval n-gram's index and its count of documents, for the run's report."""
    indices, counts = total
    out = io.BytesIO()
    np.savez(out, indices=indices, counts=counts)
    storage.write_bytes_atomic(eval_matches_path(output_dir), out.getvalue())


def read_eval_matches(output_dir: str) -> tuple[np.ndarray, np.ndarray]:
    """What `write_eval_matches` kept: each matched eval n-gram's index and its count of
    documents."""
    with (
        storage.open_raw(eval_matches_path(output_dir)) as f,
        np.load(io.BytesIO(f.read())) as arrays,
    ):
        return arrays["indices"], arrays["counts"]


def common_ngrams(total: tuple[np.ndarray, np.ndarray], max_matches: int) -> np.ndarray:
    """The eval n-grams found in more documents than `max_matches` (sorted indices)."""
    indices, counts = total
    return indices[counts > max_matches]


def contaminated(found: UnitFingerprints, common: np.ndarray) -> dict[int, int]:
    """Per contaminated document number, the first eval file holding one of its n-grams that is not
    common text."""
    out = {}
    for i, number in enumerate(found.eval_numbers.tolist()):
        hits, files = found.hits_of(i)
        leaks = ~np.isin(hits, common, assume_unique=True)
        if leaks.any():
            out[number] = int(files[leaks].min())
    return out
