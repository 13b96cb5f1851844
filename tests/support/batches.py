"""Loader batches in tests: taken from an iterator, compared exactly, and a two-source mixture whose
every token says which source it came from (the `sources` fixture, a plugin of the root
conftest)."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.load.data_spec import DataSource, parse_data_spec


def take(iterator, n: int) -> list[dict[str, np.ndarray]]:
    return [next(iterator) for _ in range(n)]


def assert_same(a: list[dict], b: list[dict]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.keys() == y.keys()
        for name in x:
            assert x[name].dtype == y[name].dtype, name
            np.testing.assert_array_equal(x[name], y[name])


# Token ids tell the source: web from 2, books from BOOKS_FIRST.
N_VOCAB = 2**20
BOOKS_FIRST = 500_000


@pytest.fixture(scope="session")
def sources(tmp_path_factory) -> dict[str, str]:
    """web: many short documents, ~230 tokens per record; books: one 300-900 token document per
    record. Books run out first at the weights below, so an epoch reads them exactly once."""
    from support.synthetic import unique_documents, write_prepared  # Beam's I/O: when needed

    rng = np.random.default_rng(7)
    root = tmp_path_factory.mktemp("mixture")
    web = unique_documents([int(n) for n in rng.integers(4, 60, 5000)])
    books = unique_documents([int(n) for n in rng.integers(300, 900, 80)], first_id=BOOKS_FIRST)
    paths = {name: str(root / name) for name in ("web", "books", "other")}
    held_out = unique_documents([20] * 30, first_id=400_000)
    splits = {"train": web, "validation": held_out}
    write_prepared(paths["web"], splits, n_vocab=N_VOCAB, record_tokens=256, num_shards=3)
    write_prepared(
        paths["books"], {"train": books}, n_vocab=N_VOCAB, record_tokens=256, num_shards=2
    )
    # The same ids under another tokenizer: a different end-of-text id.
    write_prepared(
        paths["other"], {"train": books}, n_vocab=N_VOCAB, eot_id=0, record_tokens=256, num_shards=1
    )
    return paths


def mixture(
    sources: dict[str, str], web: float = 0.7, books: float = 0.3
) -> tuple[DataSource, ...]:
    return parse_data_spec(f"web={web}:{sources['web']},books={books}:{sources['books']}")


def real(batch: dict[str, np.ndarray]) -> np.ndarray:
    """Where a batch holds tokens rather than padding."""
    return (
        batch["segment_ids"] > 0
        if "segment_ids" in batch
        else np.ones(batch["targets"].shape, bool)
    )


def owners(batch: dict[str, np.ndarray]) -> np.ndarray:
    """The source (0 web, 1 books) of each target token; an EOT target belongs to the document it
    ends, whose last word is its input."""
    from support.synthetic import EOT_ID

    targets, inputs = batch["targets"][real(batch)], batch["inputs"][real(batch)]
    return (np.where(targets == EOT_ID, inputs, targets) >= BOOKS_FIRST).astype(int)
