"""What a batch holds: rows drawn from the whole epoch, not one long document's consecutive windows
or pieces, and a mixture's token shares within a row of its weights from the first step."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.load import LoaderConfig, make_dataset, make_iterator
from pipeline.load.blending import next_source
from pipeline.load.rows import SOURCE_TOKENS
from schemas.records import DEFAULT_RECORD_TOKENS
from support.batches import mixture, owners
from support.synthetic import EOT_ID, unique_documents, write_prepared

SEQ_LEN, ROWS, STEPS = 256, 16, 200


@pytest.fixture(scope="module")
def web_pages(tmp_path_factory) -> tuple[str, np.ndarray]:
    """Pages of 2k to 40k tokens (8 to 160 rows each) among short ones, in records as prepare lays
    them out. Returns the directory and each page's first token id."""
    rng = np.random.default_rng(11)
    lengths = [int(n) for n in rng.integers(20, 400, 1500)] + [
        int(n) for n in rng.integers(2_000, 40_000, 60)
    ]
    order = rng.permutation(len(lengths))
    documents = unique_documents([lengths[i] for i in order])
    out = str(tmp_path_factory.mktemp("pages"))
    write_prepared(out, {"train": documents}, record_tokens=DEFAULT_RECORD_TOKENS, num_shards=4)
    return out, np.array([d[0] for d in documents])


def rows_from_one_document(batch: dict[str, np.ndarray], firsts: np.ndarray) -> int:
    """The most rows of the batch that one document fills the most of (a row's document: the one
    most of its word tokens come from)."""
    documents = []
    real = (
        batch["segment_ids"] > 0
        if "segment_ids" in batch
        else np.ones(batch["targets"].shape, bool)
    )
    for targets, tokens in zip(batch["targets"], real):
        words = targets[tokens & (targets != EOT_ID)]
        if len(words):
            documents.append(
                int(np.bincount(np.searchsorted(firsts, words, side="right") - 1).argmax())
            )
    return int(np.bincount(documents).max())


@pytest.mark.parametrize("packing", ["concat", "document"])
def test_a_batch_holds_rows_of_many_documents_even_among_long_ones(web_pages, packing):
    path, firsts = web_pages
    config = LoaderConfig(
        path, seq_len=SEQ_LEN, global_batch_size=ROWS, packing=packing, shard_index=0, shard_count=1
    )
    iterator = make_iterator(config)
    try:
        most = [rows_from_one_document(next(iterator), firsts) for _ in range(STEPS)]
    finally:
        iterator.close()
    # Consecutive windows (or first-fit pieces) of a stream of whole records would put most of a
    # batch's rows in one long page.
    assert np.mean(most) <= 3, np.mean(most)
    assert max(most) <= 6


@pytest.mark.parametrize("packing", ["concat", "document"])
@pytest.mark.parametrize("weights", [(0.7, 0.3), (0.2, 0.8)])
def test_a_mixture_realizes_its_weights_within_a_row_at_every_step(sources, packing, weights):
    # Books are records of one 300-900 token document each: far more than a row (32 tokens), and
    # than a batch (4 rows). Choosing a source per record would miss the weights by as much.
    config = LoaderConfig(
        mixture(sources, *weights),
        seq_len=32,
        global_batch_size=4,
        packing=packing,
        shard_index=0,
        shard_count=1,
    )
    iterator = make_iterator(config)
    try:
        taken = np.zeros(2, np.int64)
        for step in range(20):
            batch = next(iterator)
            np.testing.assert_array_equal(
                batch[SOURCE_TOKENS], np.bincount(owners(batch), minlength=2)
            )
            taken += batch[SOURCE_TOKENS]
            gaps = np.abs(taken - np.array(weights) * taken.sum())
            assert (gaps <= 32).all(), f"step {step}: tokens {taken}, {gaps} from the weights"
    finally:
        iterator.close()


def test_a_piece_over_records_is_one_segment_of_its_document(tmp_path):
    # Records of 64 tokens, rows of 48: pieces of a long document start inside records and at their
    # starts, and run over their ends.
    documents = unique_documents([700, 30, 400, 5, 250])
    write_prepared(str(tmp_path), {"train": documents}, record_tokens=64, num_shards=1)
    config = LoaderConfig(
        str(tmp_path),
        seq_len=48,
        global_batch_size=4,
        packing="document",
        num_epochs=1,
        shard_index=0,
        shard_count=1,
    )
    stream = np.concatenate([np.append(d, EOT_ID) for d in documents])
    position = {int(t): i for i, t in enumerate(stream) if t != EOT_ID}
    pieces = 0
    for batch in make_dataset(config):
        for row in range(4):
            ids = batch["segment_ids"][row]
            for segment in np.unique(ids[ids > 0]):
                mine = ids == segment
                inputs, targets = batch["inputs"][row][mine], batch["targets"][row][mine]
                np.testing.assert_array_equal(batch["positions"][row][mine], np.arange(mine.sum()))
                at = (
                    position[int(targets[0])]
                    if targets[0] != EOT_ID
                    else position[int(inputs[0])] + 1
                )
                np.testing.assert_array_equal(targets, stream[at : at + len(targets)])
                np.testing.assert_array_equal(inputs[1:], targets[:-1])
                assert inputs[0] == (stream[at - 1] if at else EOT_ID)
                pieces += 1
    assert pieces > 20


@pytest.mark.parametrize("seed", range(2))
def test_the_blending_rule_keeps_every_source_within_a_row_of_its_weight(seed):
    # Rows of equal size (concat) and pieces of 1 to a row's tokens (document), for 2 to 7 sources.
    rng = np.random.default_rng(seed)
    row = 64
    for _ in range(10):
        weights = rng.dirichlet(np.ones(int(rng.integers(2, 8))) * rng.uniform(0.2, 3))
        sizes = rng.choice([4, 20, 50, row], len(weights))
        for pieces in (False, True):
            taken = np.zeros(len(weights), np.int64)
            for _ in range(300):
                k = next_source(weights.tolist(), taken.tolist(), row)
                taken[k] += min(row, int(rng.exponential(sizes[k])) + 1) if pieces else row
                assert (np.abs(taken - weights * taken.sum()) <= row).all()
