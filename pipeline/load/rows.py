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
slower on long ones. Windows hold the records' dtype (`transport_dtype`), so each slice is copied
between memoryviews, a plain copy of bytes: numpy's slice assignment costs about twice as much per
call, and a step of ~200-token documents copies some 400 slices.
"""

from __future__ import annotations

import numpy as np

from pipeline.load.global_index import StepPlan

SOURCE_TOKENS = "source_tokens"
FIELDS = "fields"
CONCAT_FIELDS = ("inputs", "targets")
DOCUMENT_FIELDS = (*CONCAT_FIELDS, "segment_ids", "positions")


def _parts(plan: StepPlan, records: list[np.ndarray], which: np.ndarray) -> zip:
    """Each part as (its record's tokens as a memoryview, start, length, dest), in plain ints;
    `which`: the index in `records` of each part's record."""
    views = [memoryview(r) for r in records]
    return zip(
        [views[i] for i in which.tolist()],
        plan.start.tolist(),
        plan.length.tolist(),
        plan.dest.tolist(),
    )


def new_window(
    steps: int, *, rows: int, seq_len: int, packing: str, source_count: int, dtype: np.dtype
) -> dict[str, np.ndarray]:
    """Zeroed arrays for `steps` batches, which the layouts below fill: a window of batches is laid
    out in place, never stacked from per-step copies.

    The fields share one array, `FIELDS` [field, step, row, seq_len] of `dtype` (see
    `transport_dtype`): a prefetch worker hands a window over as one shared-memory segment, which
    Grain makes as it sends it. A window made in shared memory from the start saves that copy but
    leaks its segment when the pipeline closes with it still in the worker's read-ahead.
    """
    fields = len(CONCAT_FIELDS) if packing == "concat" else len(DOCUMENT_FIELDS)
    shape = (fields, steps, rows, seq_len)
    window = {FIELDS: np.zeros(shape, dtype)}
    if source_count > 1:
        window[SOURCE_TOKENS] = np.zeros((steps, source_count), np.int64)
    return window


def transport_dtype(n_vocab: int, seq_len: int) -> np.dtype:
    """The narrowest dtype that holds every field (token ids, positions, segment ids) of a window:
    the records' own for vocabularies of up to 65,536 ids (uint16).

    Windows made by prefetch workers cross processes through fresh shared memory, whose pages cost
    more to create than the bytes cost to copy: uint16 halves that. `batch_of` hands int32 to the
    caller either way.
    """
    return (
        np.dtype(np.uint16)
        if max(n_vocab - 1, seq_len) <= np.iinfo(np.uint16).max
        else np.dtype(np.int32)
    )


def step_of(window: dict[str, np.ndarray], step: int) -> dict[str, np.ndarray]:
    """Step `step` of a `new_window`, as views into it."""
    fields = np.asarray(
        window[FIELDS]
    )  # a plain view: indexing Grain's shared-memory array subclass is slower
    views = {name: fields[f, step] for f, name in enumerate(DOCUMENT_FIELDS[: len(fields)])}
    if SOURCE_TOKENS in window:
        views[SOURCE_TOKENS] = window[SOURCE_TOKENS][step]
    return views


def batch_of(window: dict[str, np.ndarray], step: int) -> dict[str, np.ndarray]:
    """Step `step` of a filled `new_window` as a batch: int32 fields (views where the window is
    int32)."""
    batch = step_of(window, step)
    if window[FIELDS].dtype != np.int32:
        batch.update(
            (name, batch[name].astype(np.int32)) for name in DOCUMENT_FIELDS[: len(window[FIELDS])]
        )
    return batch


def concat_rows(
    plan: StepPlan,
    records: list[np.ndarray],
    which: np.ndarray,
    window: dict[str, np.ndarray],
    *,
    width: int,
) -> None:
    """Fills `window` (a `new_window`) with the rows of `plan`, already clipped to this host's rows:
    part `i` comes from `records[which[i]]`."""
    fields = np.asarray(window[FIELDS])
    steps, rows = fields.shape[1:3]
    flat = np.empty(steps * rows * width, fields.dtype)
    into = memoryview(flat)
    for tokens, start, length, dest in _parts(plan, records, which):
        into[dest : dest + length] = tokens[start : start + length]
    windows = flat.reshape(steps, rows, width)
    fields[0] = windows[..., :-1]
    fields[1] = windows[..., 1:]
    if SOURCE_TOKENS in window:
        # A row's targets are its window less the first token.
        heads = plan.dest % width == 0
        _count_sources(window, plan, plan.length - heads, rows * width)


def document_rows(
    plan: StepPlan,
    records: list[np.ndarray],
    which: np.ndarray,
    window: dict[str, np.ndarray],
    *,
    before: np.ndarray,
) -> None:
    """Fills `window` (a `new_window`, zeroed) with the rows of `plan`, already clipped to this
    host's rows: part `i` comes from `records[which[i]]`, and where it starts its record, its first
    input is `before[i]` (the end-of-text id, or the token a continued document has there)."""
    fields = np.asarray(window[FIELDS])
    seq_len = fields.shape[-1]
    inputs, targets, segment_ids, positions = (
        memoryview(fields[f].reshape(-1)) for f in range(len(DOCUMENT_FIELDS))
    )
    ramp = memoryview(np.arange(seq_len, dtype=fields.dtype))
    same: dict[int, memoryview] = {}  # a row's worth of one segment id
    dest, length, segment = plan.dest, plan.length, plan.segment
    # A part that goes on from the one before it (the same piece, in another record) goes on
    # counting positions; segment ids count within a row, so a part goes on only from the last one
    # in its row.
    goes_on = np.zeros(len(dest), bool)
    goes_on[1:] = (
        (dest[1:] == dest[:-1] + length[:-1])
        & (segment[1:] == segment[:-1])
        & (dest[1:] % seq_len != 0)
    )
    begin = np.cumsum(length) - length
    counted = begin - begin[np.maximum.accumulate(np.where(goes_on, 0, np.arange(len(dest))))]
    for (tokens, start, n, at), segment_id, first, token in zip(
        _parts(plan, records, which), segment.tolist(), counted.tolist(), before.tolist()
    ):
        end = at + n
        if start:
            inputs[at:end] = tokens[start - 1 : start - 1 + n]
        else:
            inputs[at] = token
            inputs[at + 1 : end] = tokens[: n - 1]
        targets[at:end] = tokens[start : start + n]
        if segment_id not in same:
            same[segment_id] = memoryview(np.full(seq_len, segment_id, fields.dtype))
        segment_ids[at:end] = same[segment_id][:n]
        positions[at:end] = ramp[first : first + n]
    if SOURCE_TOKENS in window:
        _count_sources(window, plan, length, len(fields[0, 0]) * seq_len)


def _count_sources(
    window: dict[str, np.ndarray], plan: StepPlan, tokens: np.ndarray, batch: int
) -> None:
    """Each step's target tokens from each source: `tokens` of each part, in batches of `batch` flat
    tokens."""
    counts = window[SOURCE_TOKENS]
    steps, sources = counts.shape
    slot = plan.dest // batch * sources + plan.source
    counts[:] = np.bincount(slot, tokens, steps * sources).reshape(steps, sources)
