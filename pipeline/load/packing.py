"""Packing a stream of token chunks into fixed-shape training batches.

The packers run in the main process, after multiprocess prefetch, so that their output is the same
whatever the number of prefetch workers: the workers only read and join records (the part that
touches storage), the packers only cut numpy arrays. They work on whole chunks of records at a time
and emit whole batches, so Python runs per chunk and per batch (and per document for document
packing), never per token or window.

A chunk is `{"tokens", "ends", "sources"}` (see `pipeline.load.chunks`). Records hold whole
documents (schemas/records.py), so a chunk starts at a document start, ends with an end-of-text
id, and the token before any token of the stream is the one before it in its chunk, or an
end-of-text id at a chunk's start.

Both packers keep their position as (the parent's state before the chunk they are in, an offset
into that chunk), so a checkpoint is a few integers, never buffered tokens.

Why these and not Grain's packers (`grain.experimental.ConcatThenSplitIterDataset` and
`FirstFitPackIterDataset`, wired to the same chunk stream in pipeline/load/grain_packing.py)? Where
their semantics coincide they give the same batches (tests/test_loader_grain_oracle.py: the same
windows; the same segments in the same rows), and over this chunk stream their checkpoints are a
few integers too, independent of the worker count. They are slower. The run in
docs/benchmark-run.txt (benchmarks/loader_throughput.py, 2 cores, seq_len 1024, global batch 16),
tokens/s as a fraction of the memmap baseline, with 0 / 2 prefetch workers:

    packer                      ~200-token documents   ~20k-token documents
    ours, concat                    1.02 / 1.54            2.43 / 2.41
    Grain concat-then-split         0.22 / 0.29            0.43 / 0.52
    ours, document                  0.79 / 0.75            1.11 / 1.19
    Grain first fit                 0.03 / 0.04            0.17 / 0.15

Concat-then-split cuts and packs one row at a time in Python (then a batch is stacked from rows);
first fit tries each document against the rows with a dozen numpy calls, copies it in with a few
more, and needs every document as its own element of at most `seq_len` tokens. Here Python runs
once per segment only to choose its row, and a batch's tokens are gathered in a few vectorized
calls.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import grain
import numpy as np

SOURCE_TOKENS = "source_tokens"


class _ChunkCursor:
    """The chunk being consumed (as its packer prepared it) and how to get back to it.

    While `chunk` is None (at the start, after a restore) the parent is positioned at
    `chunk_state`, so `current` reads the chunk `offset` points into.
    """

    def __init__(self, parent: grain.DatasetIterator, prepare: Callable[[dict[str, np.ndarray]], Any]):
        self.parent = parent
        self._prepare = prepare
        self.chunk: Any = None
        self.chunk_state = parent.get_state()
        self.offset = 0

    def current(self) -> Any:
        if self.chunk is None:
            self.chunk = self._prepare(next(self.parent))
        return self.chunk

    def advance(self) -> Any:
        """Moves to the start of the next chunk (raises StopIteration at the end of the stream)."""
        self.chunk_state = self.parent.get_state()
        self.chunk = None
        self.offset = 0
        return self.current()

    def get_state(self) -> dict[str, Any]:
        return {"chunk": self.chunk_state, "offset": int(self.offset)}

    def set_state(self, state: dict[str, Any]) -> None:
        self.parent.set_state(state["chunk"])
        self.chunk_state = state["chunk"]
        self.chunk = None
        self.offset = int(state["offset"])


def _token_sources(chunk: dict[str, np.ndarray]) -> np.ndarray:
    """The mixture position of the source of each token of a chunk."""
    return np.repeat(chunk["sources"], np.diff(chunk["ends"], prepend=0))


class _PackIterDataset(grain.IterDataset):
    """What both packers take: rows per batch, `seq_len`, and `source_count`.

    With `source_count` > 1 (a mixture) each batch also carries "source_tokens": int64
    [source_count], how many of its target tokens came from each source.
    """

    def __init__(self, parent: grain.IterDataset, *, rows: int, seq_len: int, source_count: int = 1):
        super().__init__(parent)
        self._rows = rows
        self._seq_len = seq_len
        self._source_count = source_count

    def __str__(self) -> str:
        return f"{type(self).__name__}(rows={self._rows}, seq_len={self._seq_len})"


class ConcatPackIterDataset(_PackIterDataset):
    """Batches of consecutive windows of the concatenated token stream.

    Each row is a window of `seq_len + 1` tokens: inputs are its first `seq_len`, targets its last
    `seq_len`. Windows do not overlap, so each token is a target at most once; documents run into
    one another, separated by the end-of-text ids the records end with. A tail shorter than a
    batch at the end of a finite stream is dropped.
    """

    def __iter__(self) -> grain.DatasetIterator:
        return _ConcatPackIterator(
            self._parent.__iter__(), rows=self._rows, seq_len=self._seq_len, source_count=self._source_count
        )


@dataclasses.dataclass(frozen=True)
class _Stream:
    """A chunk's tokens, and their sources when a mixture counts them."""

    tokens: np.ndarray
    sources: np.ndarray | None


class _ConcatPackIterator(grain.DatasetIterator):
    def __init__(self, parent: grain.DatasetIterator, *, rows: int, seq_len: int, source_count: int):
        super().__init__(parent)
        self._rows = rows
        self._seq_len = seq_len
        self._source_count = source_count
        self._cursor = _ChunkCursor(parent, self._prepare)

    def _prepare(self, chunk: dict[str, np.ndarray]) -> _Stream:
        return _Stream(chunk["tokens"], _token_sources(chunk) if self._source_count > 1 else None)

    def __next__(self) -> dict[str, np.ndarray]:
        need = self._rows * (self._seq_len + 1)
        cursor = self._cursor
        windows = np.empty(need, np.int32)
        sources = np.empty(need, np.int32) if self._source_count > 1 else None
        have = 0
        stream = cursor.current()
        while True:
            take = min(need - have, len(stream.tokens) - cursor.offset)
            windows[have : have + take] = stream.tokens[cursor.offset : cursor.offset + take]
            if sources is not None:
                sources[have : have + take] = stream.sources[cursor.offset : cursor.offset + take]
            cursor.offset += take
            have += take
            if have == need:
                break
            stream = cursor.advance()
        windows = windows.reshape(self._rows, self._seq_len + 1)
        batch = {"inputs": windows[:, :-1], "targets": windows[:, 1:]}
        if sources is not None:
            targets = sources.reshape(self._rows, self._seq_len + 1)[:, 1:]
            batch[SOURCE_TOKENS] = np.bincount(targets.ravel(), minlength=self._source_count).astype(np.int64)
        return batch

    def get_state(self) -> dict[str, Any]:
        return self._cursor.get_state()

    def set_state(self, state: dict[str, Any]) -> None:
        self._cursor.set_state(state)

    def __str__(self) -> str:
        return f"ConcatPackIterator(rows={self._rows}, seq_len={self._seq_len})"


def document_segments(tokens: np.ndarray, *, eot_id: int, seq_len: int) -> tuple[np.ndarray, np.ndarray]:
    """Start and end offsets of the segments of a chunk, in order.

    A segment is a document through its end-of-text id, cut into pieces of at most `seq_len`
    tokens when it is longer. Its targets are its own tokens and its inputs the tokens one to the
    left, so every token of the chunk is a target exactly once; a document's first piece has the
    end-of-text id before it as first input, a later piece the last token of the piece before.
    """
    bounds = np.flatnonzero(tokens == eot_id) + 1
    if not len(bounds) or bounds[-1] != len(tokens):
        bounds = np.append(bounds, len(tokens))  # a stream ending mid-document keeps its tail
    starts = np.concatenate(([0], bounds[:-1]))
    lengths = bounds - starts
    if lengths.max() <= seq_len:
        return starts, bounds
    pieces = -(-lengths // seq_len)
    # Offset of each piece within its document: 0, seq_len, 2 * seq_len, ...
    first_piece = np.repeat(np.cumsum(pieces) - pieces, pieces)
    piece_starts = np.repeat(starts, pieces) + (np.arange(len(first_piece)) - first_piece) * seq_len
    return piece_starts, np.minimum(piece_starts + seq_len, np.repeat(bounds, pieces))


@dataclasses.dataclass(frozen=True)
class _Segmented:
    """A chunk laid out for gathering rows from it.

    `padded` holds an end-of-text id, the chunk's tokens as int32, then `seq_len + 1` zeros: the
    chunk's token `i` is at `i + 1`, so a segment's inputs are read one to the left of its targets,
    and padding is read from `pad` on, where targets and inputs are zero. `starts` are indices
    into `padded`.
    """

    padded: np.ndarray
    starts: list[int]
    lengths: list[int]
    sources: np.ndarray | None
    pad: int

    @classmethod
    def of(
        cls, chunk: dict[str, np.ndarray], buffer: np.ndarray, *, eot_id: int, seq_len: int, counting: bool
    ) -> _Segmented:
        """Lays `chunk` out in `buffer` (at least `len(tokens) + seq_len + 2` long)."""
        tokens = chunk["tokens"]
        n = len(tokens)
        starts, stops = document_segments(tokens, eot_id=eot_id, seq_len=seq_len)
        padded = buffer[: n + seq_len + 2]
        padded[0] = eot_id
        padded[1 : n + 1] = tokens
        padded[n + 1 :] = 0
        sources = chunk["sources"][np.searchsorted(chunk["ends"], starts, side="right")] if counting else None
        return cls(padded, (starts + 1).tolist(), (stops - starts).tolist(), sources, n + 2)

    def gather(
        self, rows: list[list[int]], before: list[int], first_ids: list[int], arange: np.ndarray
    ) -> dict[str, np.ndarray]:
        """A batch holding segments `rows[r]` in row `r`, after `before[r]` tokens of padding.

        Their segment ids count on from `first_ids[r]`. Everything else is zero, so the batches
        gathered from consecutive chunks for one batch add up to it. `arange` counts the positions
        of the flattened batch.
        """
        seq_len = len(arange) // len(rows)
        starts, lengths, ids = [], [], []
        for row, placed in enumerate(rows):
            used = before[row]
            if used:
                starts.append(self.pad)
                lengths.append(used)
                ids.append(0)
            for segment_id, k in enumerate(placed, first_ids[row]):
                starts.append(self.starts[k])
                lengths.append(self.lengths[k])
                ids.append(segment_id)
                used += self.lengths[k]
            if used < seq_len:
                starts.append(self.pad)
                lengths.append(seq_len - used)
                ids.append(0)
        length = np.array(lengths, np.int32)
        start = np.array(starts, np.int32)
        offsets = np.cumsum(length, dtype=np.int32) - length  # where each piece begins in the flattened batch
        index = np.repeat(start - offsets, length) + arange
        within = index - np.repeat(start, length)
        targets = self.padded[index]
        # Inputs are the targets shifted right, except at the first position of each piece.
        inputs = np.empty_like(targets)
        inputs[1:] = targets[:-1]
        inputs[offsets] = self.padded[start - 1]
        segment_ids = np.repeat(np.array(ids, np.int32), length)
        shape = (len(rows), seq_len)
        return {
            "inputs": inputs.reshape(shape),
            "targets": targets.reshape(shape),
            "segment_ids": segment_ids.reshape(shape),
            "positions": np.where(segment_ids > 0, within, 0).reshape(shape),
        }


def _first_fit(lengths: list[int], first: int, room: list[int], count: list[int], placed: list[list[int]]) -> int:
    """Places segments `first, first + 1, ...` each in the first row with room for it.

    Updates each row's `room`, segment `count` and `placed` segment indices; returns the index of
    the first segment that fits in no row, or `len(lengths)` when all of them fit.
    """
    rows = range(len(room))
    for k in range(first, len(lengths)):
        n = lengths[k]
        for row in rows:
            if room[row] >= n:
                break
        else:
            return k
        room[row] -= n
        count[row] += 1
        placed[row].append(k)
    return len(lengths)


class DocumentPackIterDataset(_PackIterDataset):
    """Batches of rows packed with whole documents, first fit over the rows of the batch.

    Each segment (see `document_segments`) goes to the first row of the batch under construction
    with room for it; when none has room, the batch is emitted and a new one started. Rows are
    padded with zeros and segment id 0. `segment_ids` count segments from 1 within a row and
    `positions` count tokens from 0 within a segment, so attention can be masked at document
    boundaries. A batch still incomplete at the end of a finite stream is dropped.
    """

    def __init__(self, parent: grain.IterDataset, *, rows: int, seq_len: int, eot_id: int, source_count: int = 1):
        super().__init__(parent, rows=rows, seq_len=seq_len, source_count=source_count)
        self._eot_id = eot_id

    def __iter__(self) -> grain.DatasetIterator:
        return _DocumentPackIterator(
            self._parent.__iter__(),
            rows=self._rows,
            seq_len=self._seq_len,
            eot_id=self._eot_id,
            source_count=self._source_count,
        )


class _DocumentPackIterator(grain.DatasetIterator):
    """`offset` of the cursor counts segments of the chunk, not tokens.

    Only the first-fit choice of rows runs per segment in Python, on plain ints; the tokens of all
    segments placed from one chunk are gathered with a few vectorized numpy calls.
    """

    def __init__(self, parent: grain.DatasetIterator, *, rows: int, seq_len: int, eot_id: int, source_count: int):
        super().__init__(parent)
        self._rows = rows
        self._seq_len = seq_len
        self._eot_id = eot_id
        self._source_count = source_count
        self._cursor = _ChunkCursor(parent, self._prepare)
        # Reused for every chunk: a fresh array of a million tokens costs more in page faults than
        # the copy into it. Gathers copy out of it, and a chunk is done with before the next.
        self._buffer = np.zeros(0, np.int32)
        self._arange = np.arange(rows * seq_len, dtype=np.int32)

    def _prepare(self, chunk: dict[str, np.ndarray]) -> _Segmented:
        size = len(chunk["tokens"]) + self._seq_len + 2
        if len(self._buffer) < size:
            self._buffer = np.empty(2 * size, np.int32)
        return _Segmented.of(
            chunk, self._buffer, eot_id=self._eot_id, seq_len=self._seq_len, counting=self._source_count > 1
        )

    def __next__(self) -> dict[str, np.ndarray]:
        rows, seq_len, cursor = self._rows, self._seq_len, self._cursor
        room = [seq_len] * rows
        count = [0] * rows
        batch: dict[str, np.ndarray] = {}
        source_tokens = np.zeros(self._source_count, np.int64)
        segmented = cursor.current()
        while True:
            before = [seq_len - r for r in room]
            first_ids = [c + 1 for c in count]
            placed: list[list[int]] = [[] for _ in range(rows)]
            first = cursor.offset
            cursor.offset = end = _first_fit(segmented.lengths, first, room, count, placed)
            if end > first:
                part = segmented.gather(placed, before, first_ids, self._arange)
                batch = {name: batch[name] + part[name] for name in part} if batch else part
                if segmented.sources is not None:
                    placed_sources, weights = segmented.sources[first:end], segmented.lengths[first:end]
                    source_tokens += np.bincount(placed_sources, weights, self._source_count).astype(np.int64)
            if end < len(segmented.lengths):  # a segment found no room: the batch is full
                break
            segmented = cursor.advance()
        if self._source_count > 1:
            batch[SOURCE_TOKENS] = source_tokens
        return batch

    def get_state(self) -> dict[str, Any]:
        return self._cursor.get_state()

    def set_state(self, state: dict[str, Any]) -> None:
        self._cursor.set_state(state)

    def __str__(self) -> str:
        return f"DocumentPackIterator(rows={self._rows}, seq_len={self._seq_len})"
