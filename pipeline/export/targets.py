"""The token files of other trainers, each laid out as its own reader's source reads it.

- `megatron`: Megatron-Core's indexed dataset (`megatron/core/datasets/indexed_dataset.py`):
  `PREFIX.bin` holds the tokens back to back; `PREFIX.idx` the header `MMIDIDX\\x00\\x00`, version 1
  (`<Q`), the dtype's code (`<B`), the sequence count and the document count plus one (`<Q`), then
  each sequence's length (int32) and byte offset (int64), then the document indices (int64, from 0).
  One sequence per document, as `preprocess_data.py --append-eod` writes without sentence
  splitting; the dtype is `DType.optimal_dtype(vocabulary)`: uint16 below 65,500 ids, else int32.
- `nanogpt`: nanoGPT's `data/*/prepare.py`: headerless uint16 tokens, `train.bin` and `val.bin`
  (the names its `train.py` opens with `np.memmap`).
- `llmc`: llm.c's `dev/data/data_common.py`: a header of 256 int32 (magic, version, token count),
  then the tokens: uint16 under the GPT-2 header (20240520, version 1), uint32 under the Llama 3
  one (20240801, version 7) for a vocabulary beyond uint16.
- `datatrove`: datatrove's `TokenizedFile`: `.ds` little-endian tokens (2 or 4 bytes) and
  `.ds.index`, the uint64 end of each document; nanotron's Nanoset and datatrove's
  `DatatroveFolderDataset` read a folder of them, so each split has its own folder.

Every document keeps the boundary ids prepare wrote (the end-of-text id after it, a BOS before it
where the tokenizer has one): Megatron's `--append-eod` and nanoGPT's convention.
"""

from __future__ import annotations

import abc
import os
import shutil
import struct
import tempfile
from typing import BinaryIO

import numpy as np

from pipeline.export.split_stream import Chunk
from schemas.errors import SettingError

UINT16_IDS = 2**16
# Megatron-Core's DType.optimal_dtype: uint16 below this many ids, int32 from it on.
MEGATRON_UINT16_BELOW = 65500
INT32_IDS = 2**31
MEGATRON_HEADER = b"MMIDIDX\x00\x00"
MEGATRON_VERSION = 1
# Megatron-Core's DType codes of the two dtypes it writes tokens in.
MEGATRON_DTYPE_CODES = {np.dtype("<u2"): 8, np.dtype("<i4"): 4}
# llm.c's HEADERS_INFO: (magic, version) of each token width.
LLMC_HEADERS = {np.dtype("<u2"): (20240520, 1), np.dtype("<u4"): (20240801, 7)}
LLMC_HEADER_INTS = 256
# llm.c stores the token count in an int32 and asserts the count is below 2**31.
LLMC_MAX_TOKENS = 2**31 - 1
# Document indices written at once while the Megatron index is assembled.
_INDEX_BLOCK = 2**20


class TokenFiles(abc.ABC):
    """One split's files being written: tokens as they come, then what only the end can say."""

    @abc.abstractmethod
    def add(self, chunk: Chunk) -> None: ...

    @abc.abstractmethod
    def finish(self) -> None:
        """Completes and closes every file."""

    @abc.abstractmethod
    def close(self) -> None:
        """Closes every file, finished or not (a failed export discards them)."""


class Target(abc.ABC):
    """A format: the files it writes for a split, the dtype it holds a vocabulary's ids in."""

    name: str

    @abc.abstractmethod
    def files(self, split: str) -> tuple[str, ...]:
        """The split's files, relative to the output directory, in the order they are published
        (the tokens before the index that describes them)."""

    @abc.abstractmethod
    def dtype(self, n_vocab: int, tokens: int) -> np.dtype:
        """The little-endian dtype of the tokens; a SettingError for what the format cannot
        hold."""

    @abc.abstractmethod
    def open(self, paths: tuple[str, ...], dtype: np.dtype, tokens: int) -> TokenFiles:
        """Writers of local files at `paths` (as `files` names them) for a split of `tokens`."""

    def _refuse(self, reason: str) -> SettingError:
        return SettingError("format", self.name, f"{self.name} {reason}")


def _write(f: BinaryIO, array: np.ndarray, dtype: np.dtype) -> None:
    f.write(np.ascontiguousarray(array, dtype=dtype).data)


class _Flat(TokenFiles):
    """Tokens back to back after a fixed header, and optionally each document's end."""

    def __init__(self, path: str, dtype: np.dtype, header: bytes = b"", ends: str | None = None):
        self._dtype = dtype
        self._tokens = open(path, "wb")
        self._tokens.write(header)
        self._ends = open(ends, "wb") if ends else None

    def add(self, chunk: Chunk) -> None:
        _write(self._tokens, chunk.tokens, self._dtype)
        if self._ends:
            _write(self._ends, chunk.ends, np.dtype("<u8"))

    def finish(self) -> None:
        self.close()

    def close(self) -> None:
        self._tokens.close()
        if self._ends:
            self._ends.close()


class _MegatronFiles(TokenFiles):
    """The `.bin` as it comes; each document's length and byte offset go to spool files beside the
    `.idx`, which is assembled from them at the end (its counts come before them), so memory stays
    bounded whatever the number of documents."""

    def __init__(self, paths: tuple[str, ...], dtype: np.dtype):
        self._tokens = _Flat(paths[0], dtype)
        self._index_path = paths[1]
        self._dtype = dtype
        spool_dir = os.path.dirname(paths[1])
        self._lengths = tempfile.TemporaryFile(dir=spool_dir)
        self._pointers = tempfile.TemporaryFile(dir=spool_dir)
        self._documents = 0
        self._last_end = 0

    def add(self, chunk: Chunk) -> None:
        self._tokens.add(chunk)
        if not len(chunk.ends):
            return
        starts = np.concatenate(([self._last_end], chunk.ends[:-1]))
        _write(self._lengths, chunk.ends - starts, np.dtype("<i4"))
        _write(self._pointers, starts * self._dtype.itemsize, np.dtype("<i8"))
        self._documents += len(chunk.ends)
        self._last_end = int(chunk.ends[-1])

    def finish(self) -> None:
        self._tokens.finish()
        count = self._documents
        with open(self._index_path, "wb") as f:
            f.write(MEGATRON_HEADER)
            f.write(struct.pack("<Q", MEGATRON_VERSION))
            f.write(struct.pack("<B", MEGATRON_DTYPE_CODES[self._dtype]))
            f.write(struct.pack("<QQ", count, count + 1))
            for spool in (self._lengths, self._pointers):
                spool.seek(0)
                shutil.copyfileobj(spool, f)
            for first in range(0, count + 1, _INDEX_BLOCK):
                _write(f, np.arange(first, min(first + _INDEX_BLOCK, count + 1)), np.dtype("<i8"))
        self.close()

    def close(self) -> None:
        self._tokens.close()
        self._lengths.close()
        self._pointers.close()


class Megatron(Target):
    name = "megatron"

    def files(self, split: str) -> tuple[str, ...]:
        return (f"{split}.bin", f"{split}.idx")

    def dtype(self, n_vocab: int, tokens: int) -> np.dtype:
        if n_vocab > INT32_IDS:
            raise self._refuse(
                f"holds int32 ids (a vocabulary of at most {INT32_IDS} ids), and this data has "
                f"{n_vocab}: export it as llmc or datatrove (uint32)"
            )
        return np.dtype("<u2" if n_vocab < MEGATRON_UINT16_BELOW else "<i4")

    def open(self, paths: tuple[str, ...], dtype: np.dtype, tokens: int) -> TokenFiles:
        return _MegatronFiles(paths, dtype)


class NanoGPT(Target):
    name = "nanogpt"

    def files(self, split: str) -> tuple[str, ...]:
        return (f"{flat_split_name(split)}.bin",)

    def dtype(self, n_vocab: int, tokens: int) -> np.dtype:
        if n_vocab > UINT16_IDS:
            raise self._refuse(
                f"holds uint16 ids (a vocabulary of at most {UINT16_IDS} ids), and this data has "
                f"{n_vocab}: export it as llmc (uint32), megatron or datatrove"
            )
        return np.dtype("<u2")

    def open(self, paths: tuple[str, ...], dtype: np.dtype, tokens: int) -> TokenFiles:
        return _Flat(paths[0], dtype)


class LlmC(Target):
    name = "llmc"

    def files(self, split: str) -> tuple[str, ...]:
        return (f"{flat_split_name(split)}.bin",)

    def dtype(self, n_vocab: int, tokens: int) -> np.dtype:
        if tokens > LLMC_MAX_TOKENS:
            raise self._refuse(
                f"counts a file's tokens in an int32, and this split has {tokens}: export it as "
                "megatron or datatrove"
            )
        return np.dtype("<u2" if n_vocab <= UINT16_IDS else "<u4")

    def open(self, paths: tuple[str, ...], dtype: np.dtype, tokens: int) -> TokenFiles:
        header = np.zeros(LLMC_HEADER_INTS, dtype="<i4")
        header[:3] = (*LLMC_HEADERS[dtype], tokens)
        return _Flat(paths[0], dtype, header=header.tobytes())


class Datatrove(Target):
    name = "datatrove"

    def files(self, split: str) -> tuple[str, ...]:
        return (f"{split}/{split}.ds", f"{split}/{split}.ds.index")

    def dtype(self, n_vocab: int, tokens: int) -> np.dtype:
        return np.dtype("<u2" if n_vocab <= UINT16_IDS else "<u4")

    def open(self, paths: tuple[str, ...], dtype: np.dtype, tokens: int) -> TokenFiles:
        return _Flat(paths[0], dtype, ends=paths[1])


def flat_split_name(split: str) -> str:
    """nanoGPT's `train.py` (and llm.c's data scripts) call the validation split `val`."""
    return "val" if split == "validation" else split


TARGETS: dict[str, Target] = {t.name: t for t in (Megatron(), NanoGPT(), LlmC(), Datatrove())}
