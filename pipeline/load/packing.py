"""Packing a stream of token chunks into fixed-shape training batches.

The packers run in the main process, after multiprocess prefetch, so that their output is the same
whatever the number of prefetch workers: the workers only read and join records (the part that
touches storage), the packers only cut numpy arrays. They work on whole chunks of records at a time
and emit whole batches, so Python runs per chunk and per batch (and per document for document
packing), never per token or window.

A chunk is `{"tokens": 1-D array, "ends": end offset of each record in it}`; see `JoinRecords`.

Both packers keep their position as (the parent's state before the chunk they are in, an offset
into that chunk), so a checkpoint is a few integers, never buffered tokens.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import grain
import numpy as np

from schemas.records import numpy_dtype


@dataclasses.dataclass(frozen=True)
class JoinRecords:
    """Grain batch function: consecutive raw records to one chunk (runs in the prefetch workers)."""

    dtype_name: str

    def __call__(self, records: Sequence[bytes]) -> dict[str, np.ndarray]:
        dtype = numpy_dtype(self.dtype_name)
        arrays = [np.frombuffer(r, dtype=dtype) for r in records]
        return {
            "tokens": np.concatenate(arrays),
            "ends": np.cumsum([len(a) for a in arrays], dtype=np.int64),
        }


class _ChunkCursor:
    """The chunk being consumed and how to get back to it: the shared state of both packers.

    While `chunk` is None (at the start, after a restore) the parent is positioned at
    `chunk_state`, so `current` reads the chunk `offset` points into.
    """

    def __init__(self, parent: grain.DatasetIterator):
        self.parent = parent
        self.chunk: dict[str, np.ndarray] | None = None
        self.chunk_state = parent.get_state()
        self.offset = 0

    def current(self) -> dict[str, np.ndarray]:
        if self.chunk is None:
            self.chunk = next(self.parent)
        return self.chunk

    def advance(self) -> dict[str, np.ndarray]:
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


class ConcatPackIterDataset(grain.IterDataset):
    """Batches of consecutive windows of the concatenated token stream.

    Each row is a window of `seq_len + 1` tokens: inputs are its first `seq_len`, targets its last
    `seq_len`. Windows do not overlap, so each token is a target at most once; documents run into
    one another, separated by the end-of-text ids already in the records. A tail shorter than a
    batch at the end of a finite stream is dropped.
    """

    def __init__(self, parent: grain.IterDataset, *, rows: int, seq_len: int):
        super().__init__(parent)
        self._rows = rows
        self._seq_len = seq_len

    def __iter__(self) -> grain.DatasetIterator:
        return _ConcatPackIterator(self._parent.__iter__(), rows=self._rows, seq_len=self._seq_len)

    def __str__(self) -> str:
        return f"ConcatPackIterDataset(rows={self._rows}, seq_len={self._seq_len})"


class _ConcatPackIterator(grain.DatasetIterator):
    def __init__(self, parent: grain.DatasetIterator, *, rows: int, seq_len: int):
        super().__init__(parent)
        self._rows = rows
        self._seq_len = seq_len
        self._cursor = _ChunkCursor(parent)

    def __next__(self) -> dict[str, np.ndarray]:
        need = self._rows * (self._seq_len + 1)
        cursor = self._cursor
        pieces = []
        have = 0
        tokens = cursor.current()["tokens"]
        while True:
            take = min(need - have, len(tokens) - cursor.offset)
            pieces.append(tokens[cursor.offset : cursor.offset + take])
            cursor.offset += take
            have += take
            if have == need:
                break
            tokens = cursor.advance()["tokens"]
        windows = np.concatenate(pieces).reshape(self._rows, self._seq_len + 1).astype(np.int32)
        return {"inputs": windows[:, :-1], "targets": windows[:, 1:]}

    def get_state(self) -> dict[str, Any]:
        return self._cursor.get_state()

    def set_state(self, state: dict[str, Any]) -> None:
        self._cursor.set_state(state)

    def __str__(self) -> str:
        return f"ConcatPackIterator(rows={self._rows}, seq_len={self._seq_len})"


def document_segments(
    tokens: np.ndarray, ends: np.ndarray, *, eot_id: int, seq_len: int
) -> tuple[np.ndarray, np.ndarray]:
    """Start and end offsets of the segments of a chunk, in order.

    A segment is one document (through its end-of-text id), or a record-sized piece of a longer one,
    cut further into pieces of at most `seq_len` tokens. Its targets are its own tokens and its
    inputs the tokens one to the left, with the end-of-text id standing in before a record's first
    token (see `shifted_inputs`), so every token of the chunk is a target exactly once.
    """
    bounds = np.union1d(np.flatnonzero(tokens == eot_id) + 1, ends)
    starts = np.concatenate(([0], bounds[:-1]))
    lengths = bounds - starts
    pieces = -(-lengths // seq_len)
    piece_starts = np.repeat(starts, pieces)
    # Offset of each piece within its segment: 0, seq_len, 2 * seq_len, ...
    first_piece = np.repeat(np.cumsum(pieces) - pieces, pieces)
    piece_starts = piece_starts + (np.arange(len(piece_starts)) - first_piece) * seq_len
    piece_ends = np.minimum(piece_starts + seq_len, np.repeat(bounds, pieces))
    return piece_starts, piece_ends


def shifted_inputs(tokens: np.ndarray, ends: np.ndarray, *, eot_id: int) -> np.ndarray:
    """The token before each position; the end-of-text id before each record's first token.

    A record starts with a new document (or a continuation of a long one whose earlier piece is in
    another record), so the end-of-text id plays the part of a beginning-of-sequence token.
    """
    shifted = np.empty_like(tokens)
    shifted[1:] = tokens[:-1]
    shifted[np.concatenate(([0], ends[:-1]))] = eot_id
    return shifted


class DocumentPackIterDataset(grain.IterDataset):
    """Batches of rows packed with whole documents, first fit over the rows of the batch.

    Each segment (see `document_segments`) goes to the first row of the batch under construction
    with room for it; when none has room, the batch is emitted and a new one started. Rows are
    padded with zeros and segment id 0. `segment_ids` count segments from 1 within a row and
    `positions` count tokens from 0 within a segment, so attention can be masked at document
    boundaries. A batch still incomplete at the end of a finite stream is dropped.
    """

    def __init__(self, parent: grain.IterDataset, *, rows: int, seq_len: int, eot_id: int):
        super().__init__(parent)
        self._rows = rows
        self._seq_len = seq_len
        self._eot_id = eot_id

    def __iter__(self) -> grain.DatasetIterator:
        return _DocumentPackIterator(
            self._parent.__iter__(), rows=self._rows, seq_len=self._seq_len, eot_id=self._eot_id
        )

    def __str__(self) -> str:
        return f"DocumentPackIterDataset(rows={self._rows}, seq_len={self._seq_len})"


@dataclasses.dataclass(frozen=True)
class _Segmented:
    """A chunk cut into segments, ready to copy into rows."""

    targets: np.ndarray
    inputs: np.ndarray
    starts: np.ndarray
    lengths: np.ndarray

    @classmethod
    def of(cls, chunk: dict[str, np.ndarray], *, eot_id: int, seq_len: int) -> _Segmented:
        tokens, ends = chunk["tokens"], chunk["ends"]
        starts, stops = document_segments(tokens, ends, eot_id=eot_id, seq_len=seq_len)
        inputs = shifted_inputs(tokens, ends, eot_id=eot_id)
        return cls(tokens.astype(np.int32), inputs.astype(np.int32), starts, stops - starts)

    def copy_into(self, batch: dict[str, np.ndarray], first: int, dests: list[int], ids: list[int]) -> None:
        """Copies segments `first, first + 1, ...` to flat batch offsets `dests`, all at once."""
        lengths = self.lengths[first : first + len(dests)]
        offsets = np.cumsum(lengths) - lengths
        within = np.arange(int(lengths.sum())) - np.repeat(offsets, lengths)
        src = np.repeat(self.starts[first : first + len(dests)], lengths) + within
        dst = np.repeat(np.asarray(dests, np.int64), lengths) + within
        batch["inputs"].reshape(-1)[dst] = self.inputs[src]
        batch["targets"].reshape(-1)[dst] = self.targets[src]
        batch["segment_ids"].reshape(-1)[dst] = np.repeat(np.asarray(ids, np.int32), lengths)
        batch["positions"].reshape(-1)[dst] = within


class _DocumentPackIterator(grain.DatasetIterator):
    """`offset` of the cursor counts segments of the chunk, not tokens.

    Only the first-fit choice of rows runs per segment in Python, on plain ints; the tokens of all
    segments placed from one chunk are copied with a few vectorized numpy calls.
    """

    def __init__(self, parent: grain.DatasetIterator, *, rows: int, seq_len: int, eot_id: int):
        super().__init__(parent)
        self._rows = rows
        self._seq_len = seq_len
        self._eot_id = eot_id
        self._cursor = _ChunkCursor(parent)
        self._segmented: _Segmented | None = None

    def _segment(self, chunk: dict[str, np.ndarray]) -> _Segmented:
        return _Segmented.of(chunk, eot_id=self._eot_id, seq_len=self._seq_len)

    def __next__(self) -> dict[str, np.ndarray]:
        rows, seq_len, cursor = self._rows, self._seq_len, self._cursor
        batch = {
            name: np.zeros((rows, seq_len), np.int32)
            for name in ("inputs", "targets", "segment_ids", "positions")
        }
        fill = [0] * rows
        count = [0] * rows
        if self._segmented is None:
            self._segmented = self._segment(cursor.current())
        while True:
            segmented = self._segmented
            first, dests, ids = cursor.offset, [], []
            for n in segmented.lengths[first:].tolist():
                for row in range(rows):
                    if fill[row] + n <= seq_len:
                        break
                else:
                    segmented.copy_into(batch, first, dests, ids)
                    cursor.offset = first + len(dests)
                    return batch
                dests.append(row * seq_len + fill[row])
                count[row] += 1
                ids.append(count[row])
                fill[row] += n
            segmented.copy_into(batch, first, dests, ids)
            self._segmented = None
            self._segmented = self._segment(cursor.advance())

    def get_state(self) -> dict[str, Any]:
        return self._cursor.get_state()

    def set_state(self, state: dict[str, Any]) -> None:
        self._cursor.set_state(state)
        self._segmented = None

    def __str__(self) -> str:
        return f"DocumentPackIterator(rows={self._rows}, seq_len={self._seq_len})"
