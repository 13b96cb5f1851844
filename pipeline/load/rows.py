"""A host's rows of the global batch: the records its pieces name, read and laid out.

Concat rows are windows of `seq_len + 1` tokens: inputs are the first `seq_len`, targets the last
`seq_len`; documents run into one another, separated by the end-of-text ids records end with.
Document rows hold whole documents (pieces of those over `seq_len`), with `segment_ids` counting
them from 1 within a row, `positions` counting tokens from 0 within one, and zero padding (segment
id 0) after them; a piece's inputs are the tokens one to the left of its targets in its record,
the end-of-text id before a record's first.

The pieces' tokens are gathered with a few vectorized numpy calls per batch, from one buffer that
holds every record the batch needs, each after an end-of-text id.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from pipeline.load.global_index import StepPlan

SOURCE_TOKENS = "source_tokens"


@dataclasses.dataclass(frozen=True)
class _Gather:
    """Where the pieces' tokens are in the records' buffer (`source`) and in the flat batch (`dest`)."""

    source: np.ndarray
    dest: np.ndarray
    within: np.ndarray  # each token's offset in its piece


def _gather(plan: StepPlan, records: dict[tuple[int, int], np.ndarray], eot_id: int) -> tuple[np.ndarray, _Gather]:
    keys = list(dict.fromkeys(zip(plan.source.tolist(), plan.record.tolist())))
    sizes = [len(records[k]) + 1 for k in keys]
    buffer = np.empty(sum(sizes), np.int32)
    base, at = {}, 0
    for key, size in zip(keys, sizes):
        buffer[at] = eot_id
        buffer[at + 1 : at + size] = records[key]
        base[key] = at + 1
        at += size
    starts = np.array([base[k] for k in zip(plan.source.tolist(), plan.record.tolist())], np.int64) + plan.start
    first = np.cumsum(plan.length) - plan.length  # each piece's first token among all the pieces' tokens
    within = np.arange(int(plan.length.sum())) - np.repeat(first, plan.length)
    return buffer, _Gather(np.repeat(starts, plan.length) + within, np.repeat(plan.dest, plan.length) + within, within)


def concat_rows(plan: StepPlan, records: dict[tuple[int, int], np.ndarray], *, rows: int, width: int,
                source_count: int) -> dict[str, np.ndarray]:
    """Rows of `plan` (already clipped to this host's rows) from `records[(source, record)]`."""
    buffer, at = _gather(plan, records, eot_id=0)
    flat = np.empty(rows * width, np.int32)
    flat[at.dest] = buffer[at.source]
    windows = flat.reshape(rows, width)
    batch = {"inputs": windows[:, :-1], "targets": windows[:, 1:]}
    if source_count > 1:
        owner = np.empty(rows * width, np.int64)
        owner[at.dest] = np.repeat(plan.source, plan.length)
        owner = owner.reshape(rows, width)[:, 1:]
        batch[SOURCE_TOKENS] = np.bincount(owner.ravel(), minlength=source_count).astype(np.int64)
    return batch


def document_rows(plan: StepPlan, records: dict[tuple[int, int], np.ndarray], *, rows: int, seq_len: int,
                  eot_id: int, source_count: int) -> dict[str, np.ndarray]:
    """Rows of `plan` (already clipped to this host's rows) from `records[(source, record)]`."""
    buffer, at = _gather(plan, records, eot_id)
    size = rows * seq_len
    targets, inputs, segment_ids, positions = (np.zeros(size, np.int32) for _ in range(4))
    targets[at.dest] = buffer[at.source]
    inputs[at.dest] = buffer[at.source - 1]
    segment_ids[at.dest] = np.repeat(plan.segment, plan.length)
    positions[at.dest] = at.within
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
