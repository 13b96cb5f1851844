"""A host's rows of the global batch: the records its pieces name, read and laid out.

Concat rows are windows of `seq_len + 1` tokens: inputs are the first `seq_len`, targets the last
`seq_len`; documents run into one another, separated by the end-of-text ids records end with.
Document rows hold whole documents (pieces of those over `seq_len`), with `segment_ids` counting
them from 1 within a row, `positions` counting tokens from 0 within one, and zero padding (segment
id 0) after them; a piece's inputs are the tokens one to the left of its targets in its record,
the end-of-text id before a record's first.

A record is held as int32 after an end-of-text id (`record_tokens`), so a piece's inputs are the
slice one to the left of its targets. A batch holds a few dozen pieces of hundreds to thousands
of tokens each, so each is copied as one slice: per-token index arrays would cost more.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from pipeline.load.global_index import StepPlan

SOURCE_TOKENS = "source_tokens"


def record_tokens(data: bytes, dtype: np.dtype, eot_id: int) -> np.ndarray:
    """A record's tokens as int32, after an end-of-text id: the input before its first token."""
    tokens = np.empty(len(data) // dtype.itemsize + 1, np.int32)
    tokens[0] = eot_id
    tokens[1:] = np.frombuffer(data, dtype)
    return tokens


def _pieces(plan: StepPlan, records: dict[tuple[int, int], np.ndarray]) -> Iterator[tuple[np.ndarray, int, int, int, int, int]]:
    """Each piece as (its record's `record_tokens`, source, start, length, dest, segment), in plain ints."""
    columns = (plan.source, plan.record, plan.start, plan.length, plan.dest, plan.segment)
    for source, record, start, length, dest, segment in zip(*(c.tolist() for c in columns)):
        yield records[(source, record)], source, start, length, dest, segment


def concat_rows(plan: StepPlan, records: dict[tuple[int, int], np.ndarray], *, rows: int, width: int,
                source_count: int) -> dict[str, np.ndarray]:
    """Rows of `plan` (already clipped to this host's rows) from `records[(source, record)]`."""
    flat = np.empty(rows * width, np.int32)
    owner = np.empty(rows * width, np.int64) if source_count > 1 else None
    for tokens, source, start, length, dest, _ in _pieces(plan, records):
        flat[dest : dest + length] = tokens[start + 1 : start + 1 + length]
        if owner is not None:
            owner[dest : dest + length] = source
    windows = flat.reshape(rows, width)
    batch = {"inputs": windows[:, :-1], "targets": windows[:, 1:]}
    if owner is not None:
        owner = owner.reshape(rows, width)[:, 1:]
        batch[SOURCE_TOKENS] = np.bincount(owner.ravel(), minlength=source_count).astype(np.int64)
    return batch


def document_rows(plan: StepPlan, records: dict[tuple[int, int], np.ndarray], *, rows: int, seq_len: int,
                  source_count: int) -> dict[str, np.ndarray]:
    """Rows of `plan` (already clipped to this host's rows) from `records[(source, record)]`."""
    size = rows * seq_len
    targets, inputs, segment_ids, positions = (np.zeros(size, np.int32) for _ in range(4))
    ramp = np.arange(seq_len, dtype=np.int32)
    for tokens, _, start, length, dest, segment in _pieces(plan, records):
        end = dest + length
        inputs[dest:end] = tokens[start : start + length]
        targets[dest:end] = tokens[start + 1 : start + 1 + length]
        segment_ids[dest:end] = segment
        positions[dest:end] = ramp[:length]
    shape = (rows, seq_len)
    batch = {
        "inputs": inputs.reshape(shape),
        "targets": targets.reshape(shape),
        "segment_ids": segment_ids.reshape(shape),
        "positions": positions.reshape(shape),
    }
    if source_count > 1:
        batch[SOURCE_TOKENS] = np.bincount(plan.source, plan.length, source_count).astype(np.int64)
    return batch
