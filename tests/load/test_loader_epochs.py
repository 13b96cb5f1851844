"""Every epoch reads every record once across all hosts before any repeats, however many hosts
read it, for both packings and for each source of a mixture (long documents make records of very
different lengths, so hosts reading record by record would drift apart)."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.load import LoaderConfig, make_iterator
from pipeline.load.data_spec import DataSource
from support.synthetic import EOT_ID, unique_documents, write_prepared

pytestmark = pytest.mark.integration  # every test here runs a command, a process or training

SEQ_LEN, BATCH = 32, 6


def _corpus(out: str, *, seed: int, first_id: int) -> np.ndarray:
    """Short documents among ones up to ten records (64 tokens) long; returns every word token."""
    rng = np.random.default_rng(seed)
    lengths = [int(n) for n in rng.integers(1, 40, 150)]
    for at in rng.choice(len(lengths), 15, replace=False):
        lengths[at] = int(rng.integers(3 * 64, 10 * 64))
    documents = unique_documents(lengths, first_id=first_id)
    write_prepared(out, {"train": documents}, record_tokens=64, num_shards=3)
    return np.concatenate(documents)


@pytest.fixture(scope="module")
def corpora(tmp_path_factory) -> list[tuple[str, np.ndarray]]:
    paths = [str(tmp_path_factory.mktemp(name)) for name in ("web", "books")]
    return [
        (paths[0], _corpus(paths[0], seed=1, first_id=2)),
        (paths[1], _corpus(paths[1], seed=2, first_id=10**6)),
    ]


def _step_tokens(batch: dict[str, np.ndarray], packing: str) -> np.ndarray:
    """The word tokens a host batch reads: every token of concat windows, the targets of document
    rows."""
    if packing == "concat":
        tokens = np.concatenate([batch["inputs"][:, :1], batch["targets"]], axis=1)
    else:
        tokens = batch["targets"][batch["segment_ids"] > 0]
    return tokens[tokens != EOT_ID].ravel()


def _epoch_ends_cleanly(steps: list[np.ndarray], words: np.ndarray) -> int:
    """Checks that the steps read every word of `words` once before any repeats, except within the
    step that completes the epoch; returns that step."""
    seen: set[int] = set()
    for step, tokens in enumerate(steps):
        mine = tokens[np.isin(tokens, words)].tolist()
        if set(words.tolist()) <= seen | set(mine):
            return step
        assert seen.isdisjoint(mine) and len(set(mine)) == len(mine), (
            f"a word repeats at step {step}"
        )
        seen.update(mine)
    raise AssertionError("the epoch did not end within the steps read")


def _hosts_steps(config: LoaderConfig, count: int, steps: int, packing: str) -> list[np.ndarray]:
    iterators = [
        make_iterator(LoaderConfig(**{**config.__dict__, "shard_index": i, "shard_count": count}))
        for i in range(count)
    ]
    try:
        return [
            np.concatenate([_step_tokens(next(it), packing) for it in iterators])
            for _ in range(steps)
        ]
    finally:
        for it in iterators:
            it.close()


@pytest.mark.parametrize("count", [2, 3])
@pytest.mark.parametrize("packing", ["concat", "document"])
def test_one_source_epoch_reads_every_record_once_across_hosts(corpora, packing, count):
    path, words = corpora[0]
    config = LoaderConfig(path, seq_len=SEQ_LEN, global_batch_size=BATCH, packing=packing)
    steps = _hosts_steps(config, count, 2 * len(words) // (BATCH * SEQ_LEN), packing)
    _epoch_ends_cleanly(steps, words)


@pytest.mark.parametrize("count", [2, 3])
@pytest.mark.parametrize("packing", ["concat", "document"])
def test_each_source_of_a_mixture_reads_its_records_once_per_epoch(corpora, packing, count):
    sources = (DataSource("web", corpora[0][0], 0.7), DataSource("books", corpora[1][0], 0.3))
    config = LoaderConfig(sources, seq_len=SEQ_LEN, global_batch_size=BATCH, packing=packing)
    total = sum(len(w) for _, w in corpora)
    steps = _hosts_steps(config, count, 2 * total // (BATCH * SEQ_LEN), packing)
    for _, words in corpora:
        _epoch_ends_cleanly(steps, words)
