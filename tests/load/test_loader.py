"""The loader on a small prepared directory: determinism, host coverage, restore, errors."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys

import grain
import numpy as np
import pytest

from pipeline.load import (
    LoaderConfig,
    LoaderError,
    host_batch_size,
    make_dataset,
    make_iterator,
    open_prepared,
)
from pipeline.load.directories import open_sources
from pipeline.load.global_index import Position
from pipeline.load.host_rows import HostRows
from schemas import formats
from support.batches import assert_same, take
from support.runs import REPO
from support.runs import read_split as read_records
from support.synthetic import EOT_ID, unique_documents, write_prepared


@pytest.fixture(scope="module")
def prepared(tmp_path_factory) -> str:
    rng = np.random.default_rng(0)
    lengths = [int(n) for n in rng.integers(1, 200, 300)] + [700]  # one document over a record
    out = str(tmp_path_factory.mktemp("prepared"))
    write_prepared(out, {"train": unique_documents(lengths)}, record_tokens=256, num_shards=3)
    return out


def config(data_dir: str, **overrides) -> LoaderConfig:
    base = dict(seq_len=32, global_batch_size=4, shard_index=0, shard_count=1)
    return LoaderConfig(data_dir, **{**base, **overrides})


def split_stream(data_dir: str) -> np.ndarray:
    """The split's tokens, records in manifest order, read independently of the loader: what each
    epoch of concat packing cuts its windows from, read round from an offset of its own."""
    return np.concatenate(read_records(data_dir))


def global_batches(cfg: LoaderConfig, count: int) -> list[dict[str, np.ndarray]]:
    """The global batches, joined from the rows of `count` shards read one after another."""
    parts = [
        list(make_dataset(dataclasses.replace(cfg, shard_index=i, shard_count=count)))
        for i in range(count)
    ]
    return [
        {name: np.concatenate([p[step][name] for p in parts]) for name in parts[0][step]}
        for step in range(len(parts[0]))
    ]


def rows_of(batches: list[dict[str, np.ndarray]]) -> np.ndarray:
    """Each concat row as the window it was cut from (inputs + last target), [rows, seq_len + 1]."""
    return np.concatenate(
        [np.concatenate([b["inputs"], b["targets"][:, -1:]], axis=1) for b in batches]
    )


def window_starts(rows: np.ndarray, stream: np.ndarray) -> np.ndarray:
    """Where each row starts in `stream` read round (its words are unique), -1 for a row that is not
    one run of it."""
    where = {int(t): i for i, t in enumerate(stream) if t != EOT_ID}
    doubled = np.concatenate([stream, stream])
    starts = []
    for row in rows:
        j = int(np.flatnonzero(row != EOT_ID)[0])
        at = (where[int(row[j])] - j) % len(stream)
        starts.append(at if np.array_equal(doubled[at : at + len(row)], row) else -1)
    return np.array(starts)


def coverage(starts: np.ndarray, width: int, size: int) -> np.ndarray:
    """How many of the windows at `starts` cover each position of a stream of `size` read round."""
    covered = np.zeros(size, np.int64)
    np.add.at(covered, (starts[:, None] + np.arange(width)) % size, 1)
    return covered


def test_same_config_gives_the_same_batches_and_the_seed_changes_them(prepared):
    a = take(make_iterator(config(prepared)), 8)
    b = take(make_iterator(config(prepared)), 8)
    assert_same(a, b)
    c = take(make_iterator(config(prepared, seed=1)), 8)
    assert not np.array_equal(a[0]["inputs"], c[0]["inputs"])


@pytest.fixture(scope="module")
def long_documents(tmp_path_factory) -> tuple[str, list[np.ndarray]]:
    """Short documents among documents three to ten times longer than a record (64 tokens)."""
    rng = np.random.default_rng(1)
    lengths = [int(n) for n in rng.integers(1, 40, 400)]
    for at in rng.choice(len(lengths), 40, replace=False):
        lengths[at] = int(rng.integers(3 * 64, 10 * 64))
    documents = unique_documents(lengths)
    out = str(tmp_path_factory.mktemp("long"))
    write_prepared(out, {"train": documents}, record_tokens=64, num_shards=3)
    return out, documents


def document_of(documents: list[np.ndarray]):
    """Token id -> index of its document (ids count up across documents, EOT excluded)."""
    firsts = np.array([d[0] for d in documents])
    return lambda ids: np.searchsorted(firsts, ids, side="right") - 1


def test_concat_never_runs_one_document_into_another_and_spreads_long_ones(long_documents):
    data_dir, documents = long_documents
    rows = rows_of(list(make_dataset(config(data_dir, num_epochs=1))))
    doc = document_of(documents)
    words = rows != EOT_ID
    pairs = words[:, :-1] & words[:, 1:]
    # Two words side by side in a window are consecutive tokens of one document: a different
    # document is always behind an end-of-text id.
    np.testing.assert_array_equal(doc(rows[:, 1:][pairs]), doc(rows[:, :-1][pairs]))
    np.testing.assert_array_equal(rows[:, 1:][pairs], rows[:, :-1][pairs] + 1)
    # Each token is read once; a long document is read whole, in windows from all over the epoch,
    # not in consecutive rows.
    seen = rows[words]
    assert len(np.unique(seen)) == len(seen)
    long_ones = [d for d in documents if len(d) > 3 * 64]
    whole = [d for d in long_ones if np.isin(d, seen).all()]
    assert (
        len(whole) >= len(long_ones) - 4
    )  # only the tail left unread (under a batch) may cut some
    for d in whole:
        found = np.flatnonzero(np.isin(rows, d).any(axis=1))
        assert found[-1] - found[0] > 4 * len(found)


def test_document_packing_starts_only_first_pieces_after_an_end_of_text(long_documents):
    data_dir, documents = long_documents
    seq_len = 48
    batches = list(
        make_dataset(config(data_dir, num_epochs=1, packing="document", seq_len=seq_len))
    )
    doc = document_of(documents)
    pieces: dict[int, list[tuple[int, int]]] = {}
    for b in batches:
        for row in range(b["inputs"].shape[0]):
            ids = b["segment_ids"][row]
            for sid in np.unique(ids[ids > 0]):
                inputs, targets = b["inputs"][row][ids == sid], b["targets"][row][ids == sid]
                # The end-of-text id alone is the last piece of a long document, the one of its
                # input.
                d = int(doc([inputs[0] if targets[0] == EOT_ID else targets[0]])[0])
                offset = (
                    len(documents[d]) if targets[0] == EOT_ID else int(targets[0] - documents[d][0])
                )
                # A first piece follows an end-of-text id; a later one, the token before it in its
                # document.
                assert inputs[0] == (EOT_ID if offset == 0 else documents[d][offset - 1])
                pieces.setdefault(d, []).append((offset, len(targets)))
    # The pieces of a document tile it, end-of-text id included: all but the last are seq_len long.
    # Only pieces of the dropped last batch (4 rows) are missing.
    missing = 0
    for d, found in pieces.items():
        found.sort()
        offsets = [o for o, _ in found]
        assert len(set(offsets)) == len(offsets) and all(o % seq_len == 0 for o in offsets)
        assert all(n == min(seq_len, len(documents[d]) + 1 - o) for o, n in found)
        missing += len(documents[d]) + 1 - sum(n for _, n in found)
    assert missing <= 4 * seq_len
    assert sum(len(found) > 1 for found in pieces.values()) >= 30


@pytest.mark.parametrize("count", [1, 2, 4])
def test_hosts_hold_the_rows_of_one_global_batch_that_does_not_depend_on_their_number(
    prepared, count
):
    cfg = config(prepared, global_batch_size=8, num_epochs=1)
    assert host_batch_size(dataclasses.replace(cfg, shard_count=count)) == 8 // count
    joined = global_batches(cfg, count)
    assert_same(joined, list(make_dataset(cfg)))
    # Concat packing: windows of the split's stream, each token read once, less a tail shorter than
    # a batch.
    rows, stream = rows_of(joined), split_stream(prepared)
    starts = window_starts(rows, stream)
    assert (starts >= 0).all() and coverage(starts, 33, len(stream)).max() == 1
    assert 0 <= len(stream) - rows.size < 8 * 33


def test_a_split_with_fewer_records_than_shards_is_read_by_all_of_them(tmp_path):
    out = str(tmp_path / "small")
    write_prepared(out, {"train": unique_documents([30] * 13)}, record_tokens=16, num_shards=2)
    cfg = config(out, seq_len=8, global_batch_size=16)
    reference = take(make_iterator(cfg), 3)
    assert_same(
        take(make_iterator(dataclasses.replace(cfg, shard_index=15, shard_count=16)), 3),
        [{k: v[15:] for k, v in b.items()} for b in reference],
    )


def test_epochs_continue_the_stream_cut_and_drawn_anew(prepared):
    rows, stream = (
        rows_of(list(make_dataset(config(prepared, num_epochs=2)))),
        split_stream(prepared),
    )
    starts, size = window_starts(rows, stream), len(stream)
    inside = size // 33  # the first epoch's windows; the next one runs on into the second epoch
    first, second = starts[:inside], starts[inside + 1 :]
    assert len(second) > inside - 4 - 1
    for epoch in (first, second):
        # Each epoch's windows are runs of the stream that cover it once, drawn in no stream order.
        assert (epoch >= 0).all() and coverage(epoch, 33, size).max() == 1
        assert np.mean(np.diff(epoch) == 33) < 0.05
    # The window across the epochs holds the first epoch's last tokens, then the second's first.
    left = coverage(first, 33, size) == 0
    tail = int(np.flatnonzero(left & ~np.roll(left, 1))[0])
    doubled = np.concatenate([stream, stream])
    np.testing.assert_array_equal(rows[inside][: left.sum()], doubled[tail : tail + left.sum()])
    # The second epoch is cut elsewhere and drawn in another order.
    assert len(np.intersect1d(first, second)) < 0.05 * inside


def test_document_packing_on_files(prepared):
    batches = list(
        make_dataset(config(prepared, packing="document", num_epochs=1, global_batch_size=2))
    )
    assert set(batches[0]) == {"inputs", "targets", "segment_ids", "positions"}
    targets = np.concatenate([b["targets"][b["segment_ids"] > 0] for b in batches])
    words = targets[targets != EOT_ID]
    assert len(np.unique(words)) == len(words)
    all_words = np.count_nonzero(np.concatenate(read_records(prepared)) != EOT_ID)
    assert all_words - 2 * 32 < len(words) <= all_words
    for b in batches:
        starts = b["positions"] == 0
        # A segment starts where the segment id changes, and nowhere else.
        changes = np.concatenate(
            [np.ones((2, 1), bool), np.diff(b["segment_ids"], axis=1) != 0], axis=1
        )
        np.testing.assert_array_equal(
            starts & (b["segment_ids"] > 0), changes & (b["segment_ids"] > 0)
        )


def states_and_batches(cfg: LoaderConfig, n: int) -> tuple[list[dict], list[dict]]:
    """The iterator's state before each of its first `n` batches (JSON round-tripped), and the
    batches."""
    it = make_iterator(cfg)
    try:
        states, batches = [], []
        for _ in range(n):
            states.append(json.loads(json.dumps(it.get_state())))
            batches.append(next(it))
        return states, batches
    finally:
        it.close()


@pytest.mark.parametrize("packing", ["concat", "document"])
def test_restore_continues_exactly(prepared, packing):
    states, reference = states_and_batches(config(prepared, packing=packing), 12)
    restored = make_iterator(config(prepared, packing=packing))
    for point in (7, 0, 3, 11):
        restored.set_state(states[point])
        assert_same(take(restored, 12 - point), reference[point:])


@pytest.mark.parametrize("packing", ["concat", "document", "document-first-fit"])
def test_records_held_from_the_window_before_lay_out_what_fresh_reads_do(prepared, packing):
    # Windows laid out one after another share the records where they meet, and those are not
    # read again: each window must hold what a reader that held nothing lays out.
    cfg = config(prepared, packing=packing)
    manifests = open_sources(cfg.sources)
    walking = HostRows(cfg, manifests)
    position, before, shared = Position.start(1), set(), 0
    for _ in range(10):
        records = set(walking.planner.plan_steps(position, 3)[0].record.tolist())
        window, fresh = walking.window(3), HostRows(cfg, manifests).window(3)
        after = walking.fill(position, window)
        assert HostRows(cfg, manifests).fill(position, fresh) == after
        for name in window:
            np.testing.assert_array_equal(window[name], fresh[name])
        shared += bool(records & before)
        position, before = after[-1], records
    assert shared >= 5


@pytest.mark.parametrize("version", [2, 3])
def test_a_state_of_an_earlier_plan_is_refused_in_one_line(prepared, version):
    # Version 2 placed document pieces first fit: its positions count pieces, not best-fit rows.
    # Version 3 packed best-fit groups of 256 rows, each closed whole: its rows are others.
    state = make_iterator(config(prepared, packing="document")).get_state()
    restored = make_iterator(config(prepared, packing="document"))
    expected = f"loader version {version}; this loader is version {formats.LOADER_STATE_VERSION}"
    with pytest.raises(LoaderError, match=expected) as e:
        restored.set_state({**state, "version": version})
    assert "\n" not in str(e.value)


@pytest.mark.parametrize(
    "saved, restoring",
    [("concat", "document"), ("document", "document-first-fit"), ("document-first-fit", "concat")],
)
def test_a_state_of_another_packing_is_refused_in_one_line(prepared, saved, restoring):
    # A position counts windows, best-fit rows or first-fit pieces: read by another packing, it
    # would be a position in other batches.
    it = make_iterator(config(prepared, packing=saved))
    next(it)
    state = json.loads(json.dumps(it.get_state()))
    it.close()
    restored = make_iterator(config(prepared, packing=restoring))
    refused = f"packed {saved!r}; this loader packs {restoring!r}"
    with pytest.raises(LoaderError, match=refused) as e:
        restored.set_state(state)
    assert "\n" not in str(e.value)
    restored.set_state({**state, "packing": restoring})  # the same position, its own packing


@pytest.mark.integration
def test_state_and_batches_do_not_depend_on_the_worker_count(prepared):
    # Document packing: its state (a record and a piece offset) is the richer one. Every
    # start of prefetch workers costs seconds, so each worker count restores at one or two points.
    states, reference = states_and_batches(config(prepared, packing="document"), 12)
    two = make_iterator(config(prepared, packing="document", worker_count=2))
    try:
        saved = []
        for want in reference:
            saved.append(json.loads(json.dumps(two.get_state())))
            assert_same([next(two)], [want])
        assert saved == states
        # Saved with 2 workers, restored with 0 and 1; saved with 0, restored with 2.
        for workers, points in ((0, (9, 2, 5)), (1, (4,))):
            restored = make_iterator(config(prepared, packing="document", worker_count=workers))
            for point in points:
                restored.set_state(saved[point])
                assert_same(take(restored, 12 - point), reference[point:])
            restored.close()
        two.set_state(states[6])
        assert_same(take(two, 6), reference[6:])
    finally:
        two.close()


@pytest.mark.integration
@pytest.mark.parametrize("n_vocab", [2**16, 2**16 + 1])
def test_workers_hand_over_the_main_processes_int32_batches_for_ids_at_the_top_of_the_vocabulary(
    tmp_path, n_vocab
):
    # Windows cross processes as uint16 when every id fits in it, as int32 otherwise.
    lengths = [int(n) for n in np.random.default_rng(1).integers(1, 120, 80)]
    documents = unique_documents(
        lengths, first_id=n_vocab - sum(lengths)
    )  # the vocabulary's last ids
    write_prepared(str(tmp_path), {"train": documents}, n_vocab=n_vocab)
    cfg = config(str(tmp_path), packing="document", seq_len=48)
    reference = take(make_iterator(cfg), 40)  # more than an epoch
    assert max(int(b["targets"].max()) for b in reference) == n_vocab - 1
    two = make_iterator(dataclasses.replace(cfg, worker_count=2))
    try:
        assert_same(take(two, 40), reference)
    finally:
        two.close()


def test_restore_through_an_orbax_checkpoint_manager(prepared, tmp_path):
    import orbax.checkpoint as ocp

    it = make_iterator(config(prepared))
    take(it, 5)
    expected = take(make_iterator(config(prepared)), 9)[5:]
    with ocp.CheckpointManager(tmp_path / "ckpt", item_names=("data",)) as manager:
        manager.save(5, args=ocp.args.Composite(data=grain.checkpoint.CheckpointSave(it)))
        manager.wait_until_finished()
    fresh = make_iterator(config(prepared))
    with ocp.CheckpointManager(tmp_path / "ckpt", item_names=("data",)) as manager:
        manager.restore(5, args=ocp.args.Composite(data=grain.checkpoint.CheckpointRestore(fresh)))
    assert_same(take(fresh, 4), expected)


def test_open_prepared_checks_sizes_always_and_hashes_with_verify(prepared, tmp_path):
    manifest = open_prepared(prepared, verify=True)
    assert manifest.tokenizer.eot_id == EOT_ID
    copy = tmp_path / "copy"
    subprocess.run(["cp", "-r", prepared, str(copy)], check=True)
    shard = copy / manifest.shards[0].path
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF
    shard.write_bytes(bytes(data))
    open_prepared(str(copy))  # same size: only a hash can tell
    with pytest.raises(LoaderError, match="wrong sha256"):
        open_prepared(str(copy), verify=True)
    shard.write_bytes(bytes(data[:-10]))
    with pytest.raises(LoaderError, match="wrong size"):
        open_prepared(str(copy))
    shard.unlink()
    with pytest.raises(LoaderError, match="missing"):
        open_prepared(str(copy))


def test_open_prepared_refuses_missing_or_invalid_manifests(prepared, tmp_path):
    with pytest.raises(LoaderError, match="no manifest.json"):
        open_prepared(str(tmp_path))
    manifest = json.loads(open(os.path.join(prepared, formats.MANIFEST_NAME)).read())
    manifest["version"] = 99
    (tmp_path / formats.MANIFEST_NAME).write_text(json.dumps(manifest))
    with pytest.raises(LoaderError, match="version 99"):
        open_prepared(str(tmp_path))
    (tmp_path / formats.MANIFEST_NAME).write_text("{not json")
    with pytest.raises(LoaderError, match=formats.MANIFEST_NAME):
        open_prepared(str(tmp_path))


@pytest.mark.parametrize(
    "overrides,message",
    [
        (dict(seq_len=0), "seq_len"),
        (dict(global_batch_size=0), "global_batch_size"),
        (dict(packing="bins"), "packing must be one of"),
        (dict(split="test"), "split must be one of"),
        (dict(num_epochs=0), "num_epochs"),
        (dict(worker_count=-1), "worker_count"),
        (dict(seed=-1), "seed"),
    ],
)
def test_bad_configs_are_refused_when_built(prepared, overrides, message):
    with pytest.raises(LoaderError, match=message):
        config(prepared, **overrides)


@pytest.mark.parametrize(
    "overrides,message",
    [
        (dict(split="validation"), "no 'validation' split"),
        (dict(global_batch_size=6, shard_count=4), "not divisible by the 4 parts"),
        (dict(shard_index=2, shard_count=2, global_batch_size=4), "shard_index must be in"),
        (dict(seq_len=10_000, num_epochs=1), "fewer than one global batch"),
    ],
)
def test_configs_that_cannot_work_on_this_data_are_refused(prepared, overrides, message):
    with pytest.raises(LoaderError, match=message):
        make_dataset(config(prepared, **overrides))


@pytest.mark.integration
def test_the_loader_imports_neither_beam_nor_jax(prepared):
    # Grain imports JAX's profiler when JAX is installed, so both are blocked rather than watched:
    # the loader must import, build and run with neither present.
    code = (
        "import sys; sys.modules['apache_beam'] = None; sys.modules['jax'] = None\n"
        "import pipeline.load, pipeline.load.batches\n"
        "config = pipeline.load.LoaderConfig(sys.argv[1], seq_len=8, global_batch_size=2, "
        "shard_index=0, shard_count=1)\n"
        "assert next(pipeline.load.make_iterator(config))['inputs'].shape == (2, 8)\n"
    )
    subprocess.run([sys.executable, "-c", code, prepared], check=True, cwd=REPO)
