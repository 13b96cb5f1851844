"""A host's rows of the global batch: the records its pieces name, read and laid out.

Concat rows are windows of `seq_len + 1` tokens: inputs are the first `seq_len`, targets the last
`seq_len`; documents run into one another, separated by the end-of-text ids records end with.
Document rows hold whole documents (pieces of those over `seq_len`), with `segment_ids` counting
them from 1 within a row, `positions` counting tokens from 0 within one, and zero padding (segment
id 0) after them; a piece's inputs are the tokens one to the left of its targets, the end-of-text
id before a document's first. A piece of a document that runs over several records comes as one
part per record, one after another under one segment id.

A record is held as the bytes read (a view of its stored dtype); only the pieces a batch takes are
copied out, each as one slice: a window or piece of a long document is a small part of its record.
Per-token index arrays measured a tenth faster on ~200-token documents and three to seven times
slower on long ones.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from pipeline.load.global_index import StepPlan

SOURCE_TOKENS = "source_tokens"
FIELDS = "fields"
CONCAT_FIELDS = ("inputs", "targets")
DOCUMENT_FIELDS = (*CONCAT_FIELDS, "segment_ids", "positions")


def _pieces(
    plan: StepPlan, records: dict[tuple[int, int], np.ndarray]
) -> Iterator[tuple[np.ndarray, tuple[int, int], int, int, int, int]]:
    """Each piece as (its record's tokens, (source, record), start, length, dest, segment), in plain ints."""
    columns = (plan.source, plan.record, plan.start, plan.length, plan.dest, plan.segment)
    for source, record, start, length, dest, segment in zip(*(c.tolist() for c in columns)):
        yield records[(source, record)], (source, record), start, length, dest, segment


def new_window(steps: int, *, rows: int, seq_len: int, packing: str, source_count: int,
               dtype: np.dtype = np.dtype(np.int32)) -> dict[str, np.ndarray]:
    """Zeroed arrays for `steps` batches, which the layouts below fill one step at a time (through
    `step_of`): a window of batches is laid out in place, never stacked from per-step copies.

    The fields share one array, `FIELDS` [field, step, row, seq_len] of `dtype` (see
    `transport_dtype`): a prefetch worker hands a window over as one shared-memory segment.
    """
    fields = len(DOCUMENT_FIELDS) if packing == "document" else len(CONCAT_FIELDS)
    window = {FIELDS: np.zeros((fields, steps, rows, seq_len), dtype)}
    if source_count > 1:
        window[SOURCE_TOKENS] = np.zeros((steps, source_count), np.int64)
    return window


def transport_dtype(n_vocab: int, seq_len: int) -> np.dtype:
    """The narrowest dtype that holds every field (token ids, positions, segment ids) of a window.

    Windows made by prefetch workers cross processes through fresh shared memory, whose pages cost
    more to create than the bytes cost to copy: uint16 halves that for vocabularies of up to 65,536
    ids. `batch_of` hands int32 to the caller either way.
    """
    return np.dtype(np.uint16) if max(n_vocab - 1, seq_len) <= np.iinfo(np.uint16).max else np.dtype(np.int32)


def step_of(window: dict[str, np.ndarray], step: int) -> dict[str, np.ndarray]:
    """Step `step` of a `new_window`, as views into it: what the layouts below fill."""
    fields = np.asarray(window[FIELDS])  # a plain view: indexing Grain's shared-memory array subclass is slower
    views = {name: fields[f, step] for f, name in enumerate(DOCUMENT_FIELDS[: len(fields)])}
    if SOURCE_TOKENS in window:
        views[SOURCE_TOKENS] = window[SOURCE_TOKENS][step]
    return views


def batch_of(window: dict[str, np.ndarray], step: int) -> dict[str, np.ndarray]:
    """Step `step` of a filled `new_window` as a batch: int32 fields, views unless the window was
    made narrower."""
    batch = step_of(window, step)
    if window[FIELDS].dtype != np.int32:
        batch.update((name, batch[name].astype(np.int32)) for name in DOCUMENT_FIELDS[: len(window[FIELDS])])
    return batch


def concat_rows(plan: StepPlan, records: dict[tuple[int, int], np.ndarray], batch: dict[str, np.ndarray], *,
                width: int) -> None:
    """Fills `batch` (one step of a `new_window`) with the rows of `plan`, already clipped to this
    host's rows, from `records[(source, record)]`."""
    rows = len(batch["inputs"])
    flat = np.empty(rows * width, np.int32)
    owner = np.empty(rows * width, np.int64) if SOURCE_TOKENS in batch else None
    for tokens, (source, _), start, length, dest, _ in _pieces(plan, records):
        flat[dest : dest + length] = tokens[start : start + length]
        if owner is not None:
            owner[dest : dest + length] = source
    windows = flat.reshape(rows, width)
    batch["inputs"][:] = windows[:, :-1]
    batch["targets"][:] = windows[:, 1:]
    if owner is not None:
        owner = owner.reshape(rows, width)[:, 1:]
        batch[SOURCE_TOKENS][:] = np.bincount(owner.ravel(), minlength=len(batch[SOURCE_TOKENS]))


def document_rows(plan: StepPlan, records: dict[tuple[int, int], np.ndarray], batch: dict[str, np.ndarray], *,
                  before: dict[tuple[int, int], int]) -> None:
    """Fills `batch` (one step of a `new_window`, zeroed) with the rows of `plan`, already clipped to
    this host's rows, from `records[(source, record)]`; `before[(source, record)]` is the input
    before a record's first token (the end-of-text id, or the token a continued document has there)."""
    seq_len = batch["inputs"].shape[1]
    inputs, targets, segment_ids, positions = (batch[name].reshape(-1) for name in DOCUMENT_FIELDS)
    ramp = np.arange(seq_len, dtype=np.int32)
    previous = (-1, -1)  # (dest past the last part, its segment): a part that goes on from it
    for tokens, key, start, length, dest, segment in _pieces(plan, records):
        end = dest + length
        if start:
            inputs[dest:end] = tokens[start - 1 : start - 1 + length]
        else:
            inputs[dest] = before[key]
            inputs[dest + 1 : end] = tokens[: length - 1]
        targets[dest:end] = tokens[start : start + length]
        segment_ids[dest:end] = segment
        # Segment ids count within a row: a part goes on from the last one in its row, not another's.
        first = positions[dest - 1] + 1 if previous == (dest, segment) and dest % seq_len else 0
        positions[dest:end] = ramp[first : first + length]
        previous = end, segment
    if SOURCE_TOKENS in batch:
        batch[SOURCE_TOKENS][:] = np.bincount(plan.source, plan.length, len(batch[SOURCE_TOKENS]))
