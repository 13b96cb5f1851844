"""Record layout of the prepared shards.

A record is a flat run of token ids, little-endian, of the manifest's dtype. Consecutive documents
of one work unit (after its seeded shuffle) are packed greedily into records of at most
`record_tokens` tokens, each ending with its end-of-text id. A document longer than that is cut
into records of `record_tokens` tokens from its start, its last part a record of its own: so no
record is longer than `record_tokens`, a record that does not end with an end-of-text id is
continued by the next record of its shard, and only a record that starts a document follows one.

Every record is bounded because the loader reads a record to take a window or a piece of it, and
it draws those from all over an epoch: an unbounded record (a book of a million tokens) would be
read whole for every window of it. Packing many short documents per record keeps per-record costs
(writing, the loader's random reads) off the hot path: TinyStories documents are ~200 tokens, so
one document per record would make record overhead dominate.
"""

from __future__ import annotations

import numpy as np

DEFAULT_RECORD_TOKENS = 8192
UINT16_VOCAB_LIMIT = 2**16


def token_dtype_name(n_vocab: int) -> str:
    """The narrowest dtype that holds every token id of a vocabulary."""
    if n_vocab <= 0:
        raise ValueError(f"n_vocab must be positive (got {n_vocab=})")
    return "uint16" if n_vocab <= UINT16_VOCAB_LIMIT else "uint32"


def numpy_dtype(dtype_name: str) -> np.dtype:
    """The explicit little-endian numpy dtype, so shards read the same on any host."""
    if dtype_name not in ("uint16", "uint32"):
        raise ValueError(f"unsupported token dtype {dtype_name!r}; expected 'uint16' or 'uint32'")
    return np.dtype("<u2" if dtype_name == "uint16" else "<u4")


def encode_record(tokens: np.ndarray, dtype_name: str) -> bytes:
    return np.ascontiguousarray(tokens, dtype=numpy_dtype(dtype_name)).tobytes()


def decode_record(record: bytes, dtype_name: str) -> np.ndarray:
    return np.frombuffer(record, dtype=numpy_dtype(dtype_name))


def record_bounds(lengths: list[int], record_tokens: int) -> list[int]:
    """Offsets cutting the concatenated documents, of these lengths, into records (the rule
    above)."""
    bounds = [0]
    position, used = 0, 0
    for length in lengths:
        if used and used + length > record_tokens:
            bounds.append(position)
            used = 0
        if length > record_tokens:
            bounds += range(position + record_tokens, position + length, record_tokens)
            bounds.append(position + length)  # the document's last part is a record of its own
        else:
            used += length
        position += length
    if position > bounds[-1]:
        bounds.append(position)
    return bounds
