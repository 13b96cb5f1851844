"""A host's rows of the global batch: the records its pieces name, read and laid out.

Concat rows are windows of `seq_len + 1` tokens: inputs are the first `seq_len`, targets the last
`seq_len`; documents run into one another, separated by the end-of-text ids records end with.
Document rows hold whole documents (pieces of those over `seq_len`), with `segment_ids` counting
them from 1 within a row, `positions` counting tokens from 0 within one, and zero padding (segment
id 0) after them; a piece's inputs are the tokens one to the left of its targets in its record,
the end-of-text id before a record's first.
"""

from __future__ import annotations

import numpy as np

from pipeline.load.global_index import StepPlan

SOURCE_TOKENS = "source_tokens"


def concat_rows(plan: StepPlan, records: dict[tuple[int, int], np.ndarray], *, rows: int, width: int,
                source_count: int) -> dict[str, np.ndarray]:
    """Rows of `plan` (already clipped to this host's rows) from `records[(source, record)]`."""
    flat = np.empty(rows * width, np.int32)
    for source, record, start, length, dest in zip(
        plan.source.tolist(), plan.record.tolist(), plan.start.tolist(), plan.length.tolist(), plan.dest.tolist()
    ):
        flat[dest : dest + length] = records[source, record][start : start + length]
    windows = flat.reshape(rows, width)
    batch = {"inputs": windows[:, :-1], "targets": windows[:, 1:]}
    if source_count > 1:
        owner = np.repeat(plan.source, plan.length).reshape(rows, width)[:, 1:]
        batch[SOURCE_TOKENS] = np.bincount(owner.ravel(), minlength=source_count).astype(np.int64)
    return batch


def document_rows(plan: StepPlan, records: dict[tuple[int, int], np.ndarray], *, rows: int, seq_len: int,
                  eot_id: int, source_count: int) -> dict[str, np.ndarray]:
    """Rows of `plan` (already clipped to this host's rows) from `records[(source, record)]`."""
    size = rows * seq_len
    targets = np.zeros(size, np.int32)
    inputs = np.zeros(size, np.int32)
    segment_ids = np.zeros(size, np.int32)
    positions = np.zeros(size, np.int32)
    arange = np.arange(seq_len, dtype=np.int32)
    for source, record, start, length, dest, segment in zip(
        plan.source.tolist(), plan.record.tolist(), plan.start.tolist(), plan.length.tolist(), plan.dest.tolist(),
        plan.segment.tolist(),
    ):
        tokens = records[source, record]
        targets[dest : dest + length] = tokens[start : start + length]
        if start:
            inputs[dest : dest + length] = tokens[start - 1 : start + length - 1]
        else:
            inputs[dest] = eot_id
            inputs[dest + 1 : dest + length] = tokens[: length - 1]
        segment_ids[dest : dest + length] = segment
        positions[dest : dest + length] = arange[:length]
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
