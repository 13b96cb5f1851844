"""Host sharding and the packers, on in-memory Grain datasets (no files)."""

from __future__ import annotations

import grain
import numpy as np
import pytest

from pipeline.load.chunks import JoinRecords, TagSource
from pipeline.load.host_sharding import host_records, resolve_shard
from pipeline.load.packing import (
    SOURCE_TOKENS,
    ConcatPackIterDataset,
    DocumentPackIterDataset,
    document_segments,
)
from schemas.records import encode_record, record_bounds

EOT = 1


def epochs_of(total: int, *, seed: int, index: int, count: int, epochs: int) -> list[list[int]]:
    part = host_records(grain.MapDataset.range(total), seed=seed, shard_index=index, shard_count=count)
    stream = part.repeat(epochs)
    return [[stream[e * len(part) + j] for j in range(len(part))] for e in range(epochs)]


@pytest.mark.parametrize("count", [1, 2, 3, 4])
@pytest.mark.parametrize("total", [7, 50])
def test_host_parts_are_disjoint_balanced_and_cover_the_split(count, total):
    parts = [epochs_of(total, seed=3, index=i, count=count, epochs=3) for i in range(count)]
    for epoch in range(3):
        chosen = [parts[i][epoch] for i in range(count)]
        flat = [r for part in chosen for r in part]
        assert all(len(part) == total // count for part in chosen)
        assert len(set(flat)) == len(flat), "hosts overlap"
        assert set(flat) <= set(range(total))
        assert len(flat) == total - total % count, "more than the documented remainder left out"


def test_each_epoch_is_a_new_permutation_and_the_seed_decides_it():
    one = epochs_of(50, seed=0, index=0, count=1, epochs=4)
    assert all(sorted(epoch) == list(range(50)) for epoch in one)
    assert len({tuple(epoch) for epoch in one}) == 4
    assert one == epochs_of(50, seed=0, index=0, count=1, epochs=4)
    other = epochs_of(50, seed=1, index=0, count=1, epochs=4)
    # Seeds are mixed, so seed 1 is not seed 0 shifted by an epoch.
    assert other[0] != one[1] and other[0] != one[0]


def test_sources_of_a_mixture_are_shuffled_differently():
    a, b = (host_records(grain.MapDataset.range(50), seed=0, shard_index=0, shard_count=1, source=s) for s in (0, 1))
    assert list(a) != list(b)


def test_left_out_records_change_between_epochs():
    parts = [epochs_of(10, seed=0, index=i, count=3, epochs=6) for i in range(3)]
    left_out = {frozenset(set(range(10)) - {r for i in range(3) for r in parts[i][e]}) for e in range(6)}
    assert len(left_out) > 1


def test_resolve_shard_checks_the_index():
    assert resolve_shard(2, 3) == (2, 3)
    assert resolve_shard(None, None) == (0, 1)  # JAX on one CPU process
    with pytest.raises(ValueError, match="shard_index"):
        resolve_shard(3, 3)


def sample_records(seed: int, count: int = 120, record_tokens: int = 50) -> list[np.ndarray]:
    """Records as prepare writes them: whole documents of unique ascending ids (from 2), each ending
    with EOT; some documents are several times longer than a record. No document is empty, so the
    token before an EOT is always a word of its document."""
    rng = np.random.default_rng(seed)
    lengths = [int(n) for n in rng.integers(2, 25, count)]
    for at in rng.choice(count, count // 15, replace=False):
        lengths[at] = int(rng.integers(record_tokens, 4 * record_tokens))
    documents, next_id = [], 2
    for n in lengths:
        documents.append(np.append(np.arange(next_id, next_id + n - 1), EOT))
        next_id += n - 1
    stream = np.concatenate(documents)
    bounds = record_bounds(lengths, record_tokens)
    return [stream[a:b] for a, b in zip(bounds[:-1], bounds[1:])]


def chunks_of(records: list[np.ndarray], per_chunk: int, sources: list[int] | None = None) -> grain.IterDataset:
    """The packers' input, made as the loader makes it, from records already in host order."""
    sources = sources or [0] * len(records)
    tagged = [TagSource(s)(encode_record(r, "uint32")) for s, r in zip(sources, records)]
    return grain.MapDataset.source(tagged).batch(per_chunk, batch_fn=JoinRecords("uint32")).to_iter_dataset()


@pytest.mark.parametrize("per_chunk", [1, 3, 100])
def test_concat_windows_are_the_token_stream_in_order(per_chunk):
    records = sample_records(0)
    stream = np.concatenate(records)
    rows, seq_len = 3, 7
    batches = list(ConcatPackIterDataset(chunks_of(records, per_chunk), rows=rows, seq_len=seq_len))
    window = seq_len + 1
    assert len(batches) == len(stream) // (rows * window)
    for b, batch in enumerate(batches):
        assert batch.keys() == {"inputs", "targets"}
        assert batch["inputs"].dtype == np.int32 and batch["inputs"].shape == (rows, seq_len)
        expected = stream[b * rows * window : (b + 1) * rows * window].reshape(rows, window)
        np.testing.assert_array_equal(batch["inputs"], expected[:, :-1])
        np.testing.assert_array_equal(batch["targets"], expected[:, 1:])


def test_document_segments_cut_at_end_of_text_and_seq_len():
    tokens = np.array([5, 6, EOT, 7, 8, 9, 10, 11, EOT, 12, 13, EOT, EOT])
    starts, stops = document_segments(tokens, eot_id=EOT, seq_len=4)
    assert list(zip(starts.tolist(), stops.tolist())) == [(0, 3), (3, 7), (7, 9), (9, 12), (12, 13)]


def check_document_batch(batch: dict[str, np.ndarray], seq_len: int) -> list[tuple[int, np.ndarray]]:
    """Checks one batch's invariants; returns its segments' (first input, targets)."""
    assert all(batch[name].dtype == np.int32 for name in ("inputs", "targets", "segment_ids", "positions"))
    segments = []
    for row in range(batch["inputs"].shape[0]):
        ids = batch["segment_ids"][row]
        used = int(np.count_nonzero(ids))
        assert (ids[used:] == 0).all(), "padding only at the end of a row"
        assert (batch["inputs"][row, used:] == 0).all() and (batch["targets"][row, used:] == 0).all()
        assert (batch["positions"][row, used:] == 0).all()
        assert list(np.unique(ids[:used])) == list(range(1, int(ids[:used].max(initial=0)) + 1))
        assert (np.diff(ids[:used]) >= 0).all()
        for sid in np.unique(ids[:used]):
            at = np.flatnonzero(ids == sid)
            inputs, targets = batch["inputs"][row, at], batch["targets"][row, at]
            np.testing.assert_array_equal(batch["positions"][row, at], np.arange(len(at)))
            np.testing.assert_array_equal(inputs[1:], targets[:-1])
            assert EOT not in targets[:-1], "a segment holds one document"
            segments.append((int(inputs[0]), targets))
    return segments


@pytest.mark.parametrize("rows,seq_len,per_chunk", [(1, 16, 4), (4, 16, 1), (4, 16, 4), (3, 64, 7)])
def test_document_packing_keeps_documents_whole_and_every_token_once(rows, seq_len, per_chunk):
    records = sample_records(1)
    batches = list(DocumentPackIterDataset(chunks_of(records, per_chunk), rows=rows, seq_len=seq_len, eot_id=EOT))
    assert batches
    segments = [s for batch in batches for s in check_document_batch(batch, seq_len)]
    # Segments are consecutive slices of the stream, each a document or a seq_len piece of one.
    stream = np.concatenate(records)
    document_starts = set((np.flatnonzero(stream == EOT) + 1).tolist()) | {0}
    position = {int(t): i for i, t in enumerate(stream) if t != EOT}
    seen = []
    for first_input, targets in segments:
        if (targets == EOT).all():  # the last piece of a long document: the EOT alone
            start = position[first_input] + 1
        else:
            first = next(int(t) for t in targets if t != EOT)
            start = position[first] - list(targets).index(first)
        np.testing.assert_array_equal(stream[start : start + len(targets)], targets)
        end = start + len(targets)
        # Only a document's first piece follows an end-of-text id; a later one continues its document.
        assert first_input == (EOT if start in document_starts else stream[start - 1])
        assert targets[-1] == EOT or len(targets) == seq_len
        seen.append((start, end))
    seen.sort()
    assert all(a[1] <= b[0] for a, b in zip(seen, seen[1:])), "a token packed twice"
    # Only the segments of the last, incomplete batch are dropped.
    covered = sum(b - a for a, b in seen)
    assert len(stream) - rows * seq_len < covered <= len(stream)


@pytest.mark.parametrize("packing", ["concat", "document"])
def test_packers_continue_exactly_after_set_state(packing):
    records = sample_records(2)
    if packing == "concat":
        ds = ConcatPackIterDataset(chunks_of(records, 3), rows=2, seq_len=9)
    else:
        ds = DocumentPackIterDataset(chunks_of(records, 3), rows=2, seq_len=9, eot_id=EOT)
    it = iter(ds)
    expected, states = [], []
    for batch in it:
        states.append(it.get_state())
        expected.append(batch)
    assert len(expected) > 10
    restored = iter(ds)
    for point in (0, 1, 4, len(expected) - 2):
        restored.set_state(states[point])
        for want in expected[point + 1 :]:
            got = next(restored)
            for name in want:
                np.testing.assert_array_equal(got[name], want[name])
        with pytest.raises(StopIteration):
            next(restored)


@pytest.mark.parametrize("packing", ["concat", "document"])
def test_packers_count_the_target_tokens_of_each_source(packing):
    records = sample_records(3)
    sources = [i % 3 for i in range(len(records))]
    source_of = {int(t): s for r, s in zip(records, sources) for t in r if t != EOT}
    chunks = chunks_of(records, 4, sources)
    if packing == "concat":
        ds = ConcatPackIterDataset(chunks, rows=2, seq_len=9, source_count=3)
    else:
        ds = DocumentPackIterDataset(chunks, rows=2, seq_len=9, eot_id=EOT, source_count=3)
    batches = list(ds)
    assert batches
    for batch in batches:
        real = np.ones_like(batch["targets"], bool) if packing == "concat" else batch["segment_ids"] > 0
        targets, inputs = batch["targets"][real], batch["inputs"][real]
        # An EOT target belongs to the document it ends, whose word is its input.
        owners = [source_of[int(t if t != EOT else i)] for t, i in zip(targets, inputs)]
        assert batch[SOURCE_TOKENS].dtype == np.int64
        np.testing.assert_array_equal(batch[SOURCE_TOKENS], np.bincount(owners, minlength=3))
