"""Exported files read back by the readers of the trainers they are for, as lists of documents.

Megatron-Core's `IndexedDataset` and datatrove's `DatatroveFolderDataset` (the `readers` extra),
nanoGPT's `np.memmap`, and llm.c's header checked as its data loaders check it (`dataloader.h`,
`train_gpt2.py`, `train_llama3.py`: magic, version, then exactly the claimed count of tokens).
"""

from __future__ import annotations

import os

import numpy as np

# llm.c's header: magic and version for each token width.
LLMC_HEADER_BYTES = 256 * 4
LLMC_KINDS = {(20240520, 1): np.uint16, (20240801, 7): np.uint32}


def split_after(tokens: np.ndarray, eot_id: int) -> list[np.ndarray]:
    """A token stream cut after every end-of-text id (nanoGPT's and llm.c's only boundaries)."""
    ends = np.flatnonzero(tokens == eot_id) + 1
    assert len(ends) and ends[-1] == len(tokens), "the stream must end with an end-of-text id"
    return np.split(np.asarray(tokens), ends[:-1])


def megatron(prefix: str) -> tuple[list[np.ndarray], np.dtype]:
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    dataset = IndexedDataset(prefix)
    # One sequence per document: the document indices count sequences from 0.
    assert np.array_equal(dataset.document_indices, np.arange(len(dataset) + 1))
    # Copies: the dataset's arrays view its memory map, which closes with it.
    return [np.array(dataset[i]) for i in range(len(dataset))], np.dtype(dataset.index.dtype)


def datatrove(folder: str, token_size: int) -> list[np.ndarray]:
    """One window over the whole folder, positions from its `.ds.index`: a document starts where
    the position is 0."""
    from datatrove.utils.dataset import DatatroveFolderDataset

    size = sum(
        os.path.getsize(os.path.join(folder, n)) for n in os.listdir(folder) if n.endswith(".ds")
    )
    dataset = DatatroveFolderDataset(
        folder,
        seq_len=size // token_size - 1,
        filename_pattern="*.ds",
        token_size=token_size,
        return_positions=True,
    )
    assert len(dataset) == 1
    window = dataset[0]
    ids, positions = window["input_ids"].numpy(), window["positions"].numpy()
    return np.split(ids, np.flatnonzero(positions == 0)[1:])


def nanogpt(path: str) -> np.ndarray:
    return np.memmap(path, dtype=np.uint16, mode="r")


def llmc(path: str) -> np.ndarray:
    header = np.fromfile(path, dtype=np.int32, count=256)
    kind = (int(header[0]), int(header[1]))
    assert kind in LLMC_KINDS, f"llm.c reads no file of magic {kind[0]}, version {kind[1]}"
    dtype = np.dtype(LLMC_KINDS[kind])
    assert os.path.getsize(path) == LLMC_HEADER_BYTES + int(header[2]) * dtype.itemsize
    return np.memmap(path, dtype=dtype, mode="r", offset=LLMC_HEADER_BYTES)
