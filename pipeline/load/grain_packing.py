"""Grain's own packers fed the loader's chunk stream, giving batches in the loader's format.

Not used for training (packing.py says why): benchmarks/loader_throughput.py measures them against
the loader's packers, and tests/test_loader_grain_oracle.py checks the loader's packers against
them where the two agree on what a batch is.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import grain
import numpy as np

from pipeline.load.packing import document_segments


def _windows(rows: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Rows of `seq_len + 1` tokens as inputs and targets (their segment structure is dropped:
    concat packing has none)."""
    windows = rows["tokens"].astype(np.int32)
    return {"inputs": windows[:, :-1], "targets": windows[:, 1:]}


def _tokens(chunk: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {"tokens": chunk["tokens"]}


def grain_concat_then_split(chunks: grain.IterDataset, *, rows: int, seq_len: int) -> grain.IterDataset:
    """`ConcatPackIterDataset`'s batches, cut by `grain.experimental.ConcatThenSplitIterDataset`."""
    windows = grain.experimental.ConcatThenSplitIterDataset(
        chunks.map(_tokens), length_struct={"tokens": seq_len + 1}
    )
    return windows.batch(rows, drop_remainder=True).map(_windows)


@dataclasses.dataclass(frozen=True)
class _Segments(grain.experimental.FlatMapTransform):
    """A chunk -> its segments (see `document_segments`), one element each."""

    eot_id: int
    seq_len: int
    max_fan_out: int = 2**31 - 1

    def flat_map(self, chunk: dict[str, np.ndarray]) -> list[dict[str, np.ndarray]]:
        tokens = chunk["tokens"].astype(np.int32)
        inputs = np.concatenate(([self.eot_id], tokens[:-1])).astype(np.int32)
        starts, stops = document_segments(tokens, eot_id=self.eot_id, seq_len=self.seq_len)
        return [{"inputs": inputs[a:b], "targets": tokens[a:b]} for a, b in zip(starts.tolist(), stops.tolist())]


def _document_batch(batch: dict[str, Any]) -> dict[str, np.ndarray]:
    return {
        "inputs": batch["inputs"],
        "targets": batch["targets"],
        "segment_ids": batch["targets_segment_ids"],
        "positions": batch["targets_positions"],
    }


def grain_first_fit(chunks: grain.IterDataset, *, rows: int, seq_len: int, eot_id: int) -> grain.IterDataset:
    """`DocumentPackIterDataset`'s batches, placed by `grain.experimental.FirstFitPackIterDataset`.

    One packing bin per row, bins not shuffled: Grain emits the rows of each packed batch in order.
    """
    segments = grain.experimental.FlatMapIterDataset(chunks, _Segments(eot_id, seq_len))
    packed = grain.experimental.FirstFitPackIterDataset(
        segments, length_struct={"inputs": seq_len, "targets": seq_len}, num_packing_bins=rows, shuffle_bins=False
    )
    return packed.batch(rows, drop_remainder=True).map(_document_batch)
