"""Small corpora in every input format, written for a test."""

from __future__ import annotations

import gzip
import json

import numpy as np


def sample_documents(n: int, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    words = [
        "the",
        "cat",
        "sat",
        "on",
        "a",
        "mat",
        "Ünïcödé",
        "日本語",
        "emoji 🙂",
        "tab\there",
        "<|endoftext|>",
    ]
    docs = []
    for _ in range(n):
        k = int(rng.integers(2, 60))
        docs.append(" ".join(words[i] for i in rng.integers(0, len(words), k)))
    return docs


def write_text(path: str, docs: list[str], separator: str = "<|endoftext|>") -> str:
    with open(path, "w", encoding="utf-8", newline="") as f:
        for d in docs:
            f.write(f"{d}\n{separator}\n")
    return path


def write_jsonl(path: str, docs: list[str], field: str = "text") -> str:
    lines = "".join(json.dumps({field: d, "id": i}) + "\n" for i, d in enumerate(docs)).encode()
    if path.endswith(".gz"):
        lines = gzip.compress(lines, mtime=0)
    elif path.endswith(".zst"):
        import zstandard

        lines = zstandard.ZstdCompressor().compress(lines)
    with open(path, "wb") as f:
        f.write(lines)
    return path


def write_parquet(path: str, docs: list[str], row_group_size: int = 50) -> str:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(
        pa.table({"text": docs, "id": list(range(len(docs)))}), path, row_group_size=row_group_size
    )
    return path
