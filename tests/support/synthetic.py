"""A prepared directory written from token documents directly, without text or a tokenizer.

For loader tests and benchmarks: token ids can be chosen (every token of a split unique, say) so
that a test can tell exactly where each one ended up. Records follow schemas/records.py through the
same `record_bounds` and `write_shard` that `prepare` uses; the manifest is a real, schema-valid
`Manifest`.
"""

from __future__ import annotations

import os

import numpy as np

from pipeline.prepare.write.shard_writer import write_shard
from schemas import formats
from schemas.manifest import Manifest, ShardInfo, TokenizerInfo, split_totals
from schemas.prepare_config import PrepareConfig
from schemas.records import encode_record, record_bounds, token_dtype_name

EOT_ID = 1


def unique_documents(lengths: list[int], *, first_id: int = 2) -> list[np.ndarray]:
    """Documents (without their end-of-text id) whose tokens are all distinct, counting up."""
    ends = first_id + np.cumsum(lengths)
    return [np.arange(end - n, end, dtype=np.int64) for end, n in zip(ends, lengths)]


def write_prepared(
    output: str,
    splits: dict[str, list[np.ndarray]],
    *,
    n_vocab: int = 2**17,
    eot_id: int = EOT_ID,
    record_tokens: int = 256,
    num_shards: int = 3,
) -> Manifest:
    """Writes each split's documents (each gets `eot_id` appended) over `num_shards` shards."""
    dtype_name = token_dtype_name(n_vocab)
    shards = []
    for split, documents in splits.items():
        for unit, docs in enumerate(np.array_split(np.arange(len(documents)), num_shards)):
            if not len(docs):
                continue
            flat = np.concatenate([np.append(documents[i], eot_id) for i in docs])
            bounds = record_bounds([len(documents[i]) + 1 for i in docs], record_tokens)
            path = formats.shard_path(split, unit, num_shards)
            os.makedirs(os.path.dirname(os.path.join(output, path)), exist_ok=True)
            written = write_shard(
                os.path.join(output, path),
                (encode_record(flat[a:b], dtype_name) for a, b in zip(bounds[:-1], bounds[1:])),
            )
            shards.append(
                ShardInfo(
                    split=split,
                    path=path,
                    unit=unit,
                    records=written.records,
                    documents=len(docs),
                    tokens=len(flat),
                    bytes=written.bytes,
                    sha256=written.sha256,
                )
            )
    manifest = Manifest(
        tokenizer=TokenizerInfo(
            name="synthetic",
            vocab_sha256="0" * 64,
            n_vocab=n_vocab,
            eot_id=eot_id,
            tiktoken_version="none",
        ),
        dtype=dtype_name,
        config=PrepareConfig(record_tokens=record_tokens),
        inputs=(),
        num_units=num_shards,
        shards=tuple(shards),
        skipped={},
        counts={},
        totals=split_totals(tuple(shards)),
        package_versions={},
    )
    with open(os.path.join(output, formats.MANIFEST_NAME), "w") as f:
        f.write(manifest.to_json())
    return manifest


def small_prepared(path: str, splits: tuple[str, ...] = ("train", "validation")) -> str:
    """Forty random 60-token documents per split, of a 512-id vocabulary: a valid directory for
    tests that train on it or must get past it, whatever it holds."""
    rng = np.random.default_rng(0)
    write_prepared(
        path, {s: [rng.integers(2, 500, 60) for _ in range(40)] for s in splits}, n_vocab=512
    )
    return path
