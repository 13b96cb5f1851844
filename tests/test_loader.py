"""The loader on a small prepared directory: determinism, host coverage, restore, errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import grain
import numpy as np
import pytest
from conftest import read_split as read_records
from pipeline.prepare.synthetic import EOT_ID, unique_documents, write_prepared

from pipeline.load.host_sharding import host_records
from pipeline.load.loader import LoaderConfig, LoaderError, host_batch_size, make_dataset, make_iterator, open_prepared
from schemas import formats


@pytest.fixture(scope="module")
def prepared(tmp_path_factory) -> str:
    rng = np.random.default_rng(0)
    lengths = [int(n) for n in rng.integers(1, 200, 300)] + [700]  # one document over a record
    out = str(tmp_path_factory.mktemp("prepared"))
    write_prepared(out, {"train": unique_documents(lengths)}, record_tokens=256, num_shards=3)
    return out


def config(data_dir: str, **overrides) -> LoaderConfig:
    base = dict(seq_len=32, global_batch_size=4, process_index=0, process_count=1)
    return LoaderConfig(data_dir, **{**base, **overrides})


def take(iterator, n: int) -> list[dict[str, np.ndarray]]:
    return [next(iterator) for _ in range(n)]


def assert_same(a: list[dict], b: list[dict]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.keys() == y.keys()
        for name in x:
            np.testing.assert_array_equal(x[name], y[name])


def host_stream(data_dir: str, *, seed: int, index: int, count: int, epoch: int = 0) -> np.ndarray:
    """One epoch of a host's tokens, in the order the shuffle says, read independently of the loader."""
    records = read_records(data_dir)
    order = host_records(grain.MapDataset.range(len(records)), seed=seed, process_index=index, process_count=count)
    return np.concatenate([records[order[epoch * len(order) + j]] for j in range(len(order))])


def windows_of(batches: list[dict[str, np.ndarray]]) -> np.ndarray:
    """The token stream concat packing cut the batches from (each row is inputs + last target)."""
    return np.concatenate([np.concatenate([b["inputs"], b["targets"][:, -1:]], axis=1).reshape(-1) for b in batches])


def test_same_config_gives_the_same_batches_and_the_seed_changes_them(prepared):
    a = take(make_iterator(config(prepared)), 8)
    b = take(make_iterator(config(prepared)), 8)
    assert_same(a, b)
    c = take(make_iterator(config(prepared, seed=1)), 8)
    assert not np.array_equal(a[0]["inputs"], c[0]["inputs"])


@pytest.mark.parametrize("count", [1, 2, 3, 4])
def test_hosts_read_disjoint_parts_that_cover_the_split(prepared, count):
    all_tokens = np.concatenate(read_records(prepared))
    seen = []
    for index in range(count):
        cfg = config(prepared, global_batch_size=4 * count, process_index=index, process_count=count, num_epochs=1)
        assert host_batch_size(cfg) == 4
        windows = windows_of(list(make_dataset(cfg)))
        stream = host_stream(prepared, seed=0, index=index, count=count)
        # Concat packing: consecutive windows of this host's shuffled records, less the last tail.
        assert len(stream) - windows.size < 4 * 33
        np.testing.assert_array_equal(windows, stream[: windows.size])
        seen.append(stream[stream != EOT_ID])
    flat = np.concatenate(seen)
    assert len(np.unique(flat)) == len(flat), "two hosts read the same record"
    # Records left out (at most count - 1 per epoch) hold at most 256 tokens each.
    assert len(flat) >= np.count_nonzero(all_tokens != EOT_ID) - (count - 1) * 256


def test_epochs_continue_the_stream_with_a_new_order(prepared):
    stream = windows_of(list(make_dataset(config(prepared, num_epochs=2))))
    epochs = [host_stream(prepared, seed=0, index=0, count=1, epoch=e) for e in (0, 1)]
    assert len(epochs[0]) + len(epochs[1]) - 4 * 33 < len(stream)
    # The stream runs on from one epoch into the next; the second has its own record order.
    np.testing.assert_array_equal(stream, np.concatenate(epochs)[: len(stream)])
    assert not np.array_equal(epochs[0], epochs[1])


def test_document_packing_on_files(prepared):
    batches = list(make_dataset(config(prepared, packing="document", num_epochs=1, global_batch_size=2)))
    assert set(batches[0]) == {"inputs", "targets", "segment_ids", "positions"}
    targets = np.concatenate([b["targets"][b["segment_ids"] > 0] for b in batches])
    words = targets[targets != EOT_ID]
    assert len(np.unique(words)) == len(words)
    all_words = np.count_nonzero(np.concatenate(read_records(prepared)) != EOT_ID)
    assert all_words - 2 * 32 < len(words) <= all_words
    for b in batches:
        starts = b["positions"] == 0
        # A segment starts where the segment id changes, and nowhere else.
        changes = np.concatenate([np.ones((2, 1), bool), np.diff(b["segment_ids"], axis=1) != 0], axis=1)
        np.testing.assert_array_equal(starts & (b["segment_ids"] > 0), changes & (b["segment_ids"] > 0))


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("packing", ["concat", "document"])
def test_restore_continues_exactly(prepared, packing, workers):
    total = 12
    reference = take(make_iterator(config(prepared, packing=packing)), total)
    it = make_iterator(config(prepared, packing=packing, worker_count=workers))
    restored = make_iterator(config(prepared, packing=packing, worker_count=workers))
    try:
        batches, states = [], [json.loads(json.dumps(it.get_state()))]
        for _ in range(total):
            batches.append(next(it))
            states.append(json.loads(json.dumps(it.get_state())))
        # Prefetch workers change where the work runs, never the batches.
        assert_same(batches, reference)
        for point in (7, 0, 3, 11):
            restored.set_state(states[point])
            assert_same(take(restored, total - point), reference[point:])
    finally:
        it.close()
        restored.close()


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
        (dict(packing="bins"), "unknown packing"),
        (dict(split="test"), "unknown split"),
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
        (dict(global_batch_size=6, process_count=4), "not divisible by the 4 processes"),
        (dict(process_index=2, process_count=2, global_batch_size=4), "process_index must be in"),
        (dict(process_count=1000, global_batch_size=1000), "fewer than the 1000 processes"),
        (dict(seq_len=10_000, num_epochs=1), "fewer than one global batch"),
    ],
)
def test_configs_that_cannot_work_on_this_data_are_refused(prepared, overrides, message):
    with pytest.raises(LoaderError, match=message):
        make_dataset(config(prepared, **overrides))


def test_the_loader_imports_neither_beam_nor_jax(prepared):
    # Grain imports JAX's profiler when JAX is installed, so both are blocked rather than watched:
    # the loader must import, build and run with neither present.
    code = (
        "import sys; sys.modules['apache_beam'] = None; sys.modules['jax'] = None\n"
        "import pipeline.load, pipeline.load.batches\n"
        "config = pipeline.load.LoaderConfig(sys.argv[1], seq_len=8, global_batch_size=2, "
        "process_index=0, process_count=1)\n"
        "assert next(pipeline.load.make_iterator(config))['inputs'].shape == (2, 8)\n"
    )
    subprocess.run([sys.executable, "-c", code, prepared], check=True, cwd=os.path.dirname(os.path.dirname(__file__)))
