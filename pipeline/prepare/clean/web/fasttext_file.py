"""A fastText classifier's file read as numpy arrays: what `cached_fasttext` predicts from.

The layout is fastText 0.9's (`FastText::saveModel`): magic and version, the arguments, the
dictionary (words then labels, each NUL-terminated with its count and kind, then the pruned
n-grams' bucket map), then the input and output matrices, each dense or product-quantized (`.ftz`,
with or without quantized norms). A quantized matrix is decoded to its rows once, as fastText's
`QuantMatrix::addRowToVector` would add them: each sub-vector's centroid times the row's norm, in
float32. A dense one is mapped from the file, so a large model's rows are paged in as they are read.
"""

from __future__ import annotations

import dataclasses
import struct

import numpy as np

# fastText's `loss_name` and `model_name` enums.
HIERARCHICAL_SOFTMAX, SOFTMAX = 1, 3
SUPERVISED = 3
_ARGS = struct.Struct("<2i12id")  # magic, version, 12 int32 arguments, the sampling threshold
_DICTIONARY = struct.Struct("<3i2q")  # entries, words, labels, tokens, pruned n-grams
_ENTRY = struct.Struct("<qb")  # an entry's count and kind, after its NUL-terminated text
_FLAG = struct.Struct("<?")  # quantized or not
_SHAPE = struct.Struct("<2q")
_CODE_SIZE = struct.Struct("<i")
_QUANTIZER = struct.Struct("<4i")  # dimension, sub-quantizers, their dimension, the last one's
_CENTROIDS = 256  # a product quantizer's centroids per sub-quantizer


@dataclasses.dataclass(frozen=True)
class FastTextFile:
    """What prediction needs of a classifier: its arguments, dictionary and matrices."""

    dim: int
    word_ngrams: int
    loss: int
    model: int
    bucket: int
    minn: int
    maxn: int
    words: dict[str, int]  # a word's id: its input row
    labels: list[str]  # with fastText's `__label__` prefix, in output order
    label_counts: list[int]
    # A pruned model's (`.ftz`) row of each n-gram bucket after the words' rows, -1 for a bucket
    # it dropped; None where every bucket has its row.
    bucket_rows: np.ndarray | None
    input_rows: np.ndarray  # float32, one row per word, then per n-gram bucket
    output_rows: np.ndarray


class _Reader:
    def __init__(self, path: str):
        self.data = np.memmap(path, dtype=np.uint8, mode="r")
        self.at = 0

    def unpack(self, layout: struct.Struct) -> tuple:
        values = layout.unpack_from(self.data, self.at)
        self.at += layout.size
        return values

    def array(self, dtype: str, count: int) -> np.ndarray:
        found = np.frombuffer(self.data, dtype=dtype, count=count, offset=self.at)
        self.at += found.nbytes
        return found

    def text(self) -> str:
        """A NUL-terminated string (a dictionary entry: a word or label, rarely long)."""
        window = 64
        while True:
            ahead = self.data[self.at : self.at + window].tobytes()
            end = ahead.find(b"\0")
            if end >= 0 or self.at + window >= len(self.data):
                break
            window *= 4
        if end < 0:
            raise ValueError("a dictionary entry runs to the end of the file")
        self.at += end + 1
        return ahead[:end].decode("utf-8", "surrogateescape")


def read_fasttext_file(path: str) -> FastTextFile:
    """The classifier in `path` (fastText's own check of its header comes first: see
    `fasttext_models.check_header`). Raises ValueError where the file ends early or runs on."""
    reader = _Reader(path)
    try:
        args = reader.unpack(_ARGS)
        dim, word_ngrams, loss, model, bucket, minn, maxn = (
            args[i] for i in (2, 7, 8, 9, 10, 11, 12)
        )
        entries, word_count, _, _, pruned_size = reader.unpack(_DICTIONARY)
        texts, counts = [], []
        for _ in range(entries):
            texts.append(reader.text())
            counts.append(reader.unpack(_ENTRY)[0])
        pairs = reader.array("<i4", 2 * max(pruned_size, 0)).reshape(-1, 2)
        bucket_rows = _bucket_rows(pairs, bucket) if pruned_size >= 0 else None
        (quantized,) = reader.unpack(_FLAG)
        input_rows = _matrix(reader, quantized)
        (quantized_output,) = reader.unpack(_FLAG)
        output_rows = _matrix(reader, quantized and quantized_output)
    except (struct.error, ValueError, IndexError) as e:
        raise ValueError(f"{path} ends before its fastText model does ({e})") from None
    if reader.at != len(reader.data):
        raise ValueError(f"{path} runs on past its fastText model")
    return FastTextFile(
        dim=dim,
        word_ngrams=word_ngrams,
        loss=loss,
        model=model,
        bucket=bucket,
        minn=minn,
        maxn=maxn,
        words={text: i for i, text in enumerate(texts[:word_count])},
        labels=texts[word_count:],
        label_counts=counts[word_count:],
        bucket_rows=bucket_rows,
        input_rows=input_rows,
        output_rows=output_rows,
    )


def _bucket_rows(pairs: np.ndarray, bucket: int) -> np.ndarray:
    rows = np.full(bucket, -1, dtype=np.int32)
    rows[pairs[:, 0]] = pairs[:, 1]
    return rows


def _matrix(reader: _Reader, quantized: bool) -> np.ndarray:
    if not quantized:
        rows, columns = reader.unpack(_SHAPE)
        return reader.array("<f4", rows * columns).reshape(rows, columns)
    (quantized_norms,) = reader.unpack(_FLAG)
    rows, _ = reader.unpack(_SHAPE)
    (code_size,) = reader.unpack(_CODE_SIZE)
    codes = reader.array("u1", code_size)
    quantizer = _quantizer(reader)
    norms = np.ones(rows, dtype=np.float32)
    if quantized_norms:
        norm_codes = reader.array("u1", rows)
        norms = _quantizer(reader)[-1][norm_codes]
    return _decoded(quantizer, codes, rows, norms)


def _quantizer(reader: _Reader) -> tuple[int, int, int, int, np.ndarray]:
    dim, subquantizers, sub_dim, last_sub_dim = reader.unpack(_QUANTIZER)
    centroids = reader.array("<f4", dim * _CENTROIDS)
    return dim, subquantizers, sub_dim, last_sub_dim, centroids


def _decoded(quantizer: tuple, codes: np.ndarray, rows: int, norms: np.ndarray) -> np.ndarray:
    """Each row as `ProductQuantizer::addcode` adds it: centroid times norm, in float32."""
    dim, subquantizers, sub_dim, last_sub_dim, centroids = quantizer
    codes = codes.reshape(rows, subquantizers)
    decoded = np.empty((rows, dim), dtype=np.float32)
    for m in range(subquantizers):
        width = last_sub_dim if m == subquantizers - 1 else sub_dim
        table = centroids[m * _CENTROIDS * sub_dim :][: _CENTROIDS * width].reshape(-1, width)
        decoded[:, m * sub_dim : m * sub_dim + width] = norms[:, None] * table[codes[:, m]]
    return decoded
