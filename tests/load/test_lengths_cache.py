"""The loader's lengths cache cannot be taught a wrong answer: an entry is kept only for the bytes
it was scanned from, used only for a file found to hold them, and only where it holds the manifest's
counts. Each test compares with a fresh cache, which is what a correct entry gives (`stories_copy`:
a prepared directory of 12 shards to damage, with a cache of its own)."""

from __future__ import annotations

import glob
import json
import os
import shutil
import time

import numpy as np
import pytest

from pipeline.load import lengths
from pipeline.load.lengths import CACHE_ENV
from schemas import formats
from support.damage import (
    batches,
    copy_over,
    edit_consistently,
    inspect,
    lengths_report,
    restore,
    small_stories,
    swap,
    swap_two_lengths,
)
from support.runs import TINY_MODEL, run_command

# Each test prepares, copies and reads directories through the commands.
pytestmark = pytest.mark.integration


def shard_files(data_dir: str) -> list[str]:
    return sorted(glob.glob(os.path.join(data_dir, "train", "*")))


def fresh(monkeypatch, tmp_path, name: str = "fresh") -> None:
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / name))


def assert_same_batches(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> None:
    assert a.keys() == b.keys()
    for name in a:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)


def test_a_wrong_shard_inspected_then_repaired_leaves_no_wrong_entry(
    stories_copy, tmp_path, monkeypatch
):
    first, second = shard_files(stories_copy)[1:3]
    assert os.path.getsize(first) == os.path.getsize(second)
    held = copy_over(second, first)  # another shard of the same size where `first` belongs

    damaged = inspect(stories_copy)
    assert (
        "data.array_record-00001-of-00012" in damaged.error and "tokshards verify" in damaged.error
    )

    restore(first, held)  # repaired: every shard matches its manifest again
    cached = {
        take: batches(stories_copy, str(tmp_path / f"cached-{take}.npz"), take)[1]
        for take in ("30", "epoch")
    }
    cached_lengths = lengths_report(inspect(stories_copy))
    fresh(monkeypatch, tmp_path)
    for take, arrays in cached.items():
        assert arrays is not None, take
        assert_same_batches(
            arrays, batches(stories_copy, str(tmp_path / f"fresh-{take}.npz"), take)[1]
        )
    assert cached_lengths == lengths_report(inspect(stories_copy))


def test_another_directorys_manifest_poisons_no_entry(stories_copy, tmp_path, monkeypatch):
    (tmp_path / "other").mkdir()
    other = small_stories(str(tmp_path / "other"), seed=2)
    shutil.copyfile(
        os.path.join(stories_copy, formats.MANIFEST_NAME),
        os.path.join(other, formats.MANIFEST_NAME),
    )

    outcome, _ = batches(other, str(tmp_path / "other.npz"))
    assert "tokshards verify" in outcome.error
    assert "inspect: error:" in inspect(other).error

    cached = batches(stories_copy, str(tmp_path / "cached.npz"))[1]
    fresh(monkeypatch, tmp_path)
    assert_same_batches(cached, batches(stories_copy, str(tmp_path / "fresh.npz"))[1])


def test_a_shard_swapped_after_its_entry_was_made_is_found_out(stories_copy, tmp_path):
    """The entries are right, but the files are not the ones they were made from."""
    assert batches(stories_copy, str(tmp_path / "warm.npz"))[0].status == 0
    first, second = shard_files(stories_copy)[:2]
    swap(first, second)

    outcome, _ = batches(stories_copy, str(tmp_path / "swapped.npz"))
    assert (
        "data.array_record-00000-of-00012 does not hold the bytes its manifest names"
        in outcome.error
    )
    assert "inspect: error:" in inspect(stories_copy).error


def test_a_file_found_to_hold_its_bytes_is_not_hashed_again_until_it_changes(
    stories_copy, tmp_path, monkeypatch
):
    monkeypatch.setattr(
        lengths, "_SETTLED_SECONDS", 0.0
    )  # the copy's files count as settled at once
    hashed = []
    real = lengths._sha256
    monkeypatch.setattr(
        lengths, "_sha256", lambda path, **kw: hashed.append(str(path)) or real(path, **kw)
    )
    expected = batches(stories_copy, str(tmp_path / "first.npz"))[1]
    assert sorted(hashed) == shard_files(stories_copy)  # hashed as they are scanned
    hashed.clear()
    assert_same_batches(expected, batches(stories_copy, str(tmp_path / "again.npz"))[1])
    assert hashed == []

    time.sleep(0.05)  # past the clock's granularity, as any later write is
    shard = shard_files(stories_copy)[4]
    with open(shard, "r+b") as f:  # a byte changed in place: the same inode, the same size
        f.seek(100)
        byte = f.read(1)
        f.seek(100)
        f.write(bytes([byte[0] ^ 1]))
    outcome, _ = batches(stories_copy, str(tmp_path / "changed.npz"))
    assert (
        "data.array_record-00004-of-00012 does not hold the bytes its manifest names"
        in outcome.error
    )
    assert hashed == [shard]


@pytest.mark.parametrize("packing", ["concat", "document"])
def test_an_entry_that_does_not_add_up_is_scanned_again(
    stories_copy, tmp_path, monkeypatch, packing
):
    expected = batches(stories_copy, str(tmp_path / "first.npz"), "30", "--packing", packing)[1]
    entries = sorted(glob.glob(os.path.join(lengths.cache_dir(), "*", "*-docs.npy")))
    np.save(entries[0], np.load(entries[0])[:-1])  # a document short
    for name in ("offsets", "units-32"):  # cut short (the units of document packing's rows of 32)
        path = entries[1].replace("-docs.npy", f"-{name}.npy")
        if os.path.exists(path):
            with open(path, "r+b") as f:
                f.truncate(40)

    assert_same_batches(
        expected, batches(stories_copy, str(tmp_path / "again.npz"), "30", "--packing", packing)[1]
    )
    fresh(monkeypatch, tmp_path)
    assert_same_batches(
        expected, batches(stories_copy, str(tmp_path / "fresh.npz"), "30", "--packing", packing)[1]
    )


def test_an_entry_whose_lengths_lie_is_rebuilt_saying_so(stories_copy, tmp_path):
    """Two lengths swapped, the totals unchanged: document packing would place documents where
    they are not (a row starting mid-document, an end-of-text id inside a segment)."""
    args = ("--packing", "document")
    expected = batches(stories_copy, str(tmp_path / "first.npz"), "epoch", *args)[1]
    entries = sorted(glob.glob(os.path.join(lengths.cache_dir(), "*", "*-docs.npy")))
    swap_two_lengths(entries[0])

    outcome, arrays = batches(stories_copy, str(tmp_path / "again.npz"), "epoch", *args)
    assert_same_batches(expected, arrays)
    notes = outcome.err.splitlines()
    assert len(notes) == 1 and "does not match the digest written with it" in notes[0]
    assert entries[0] in notes[0] and "rebuilding the entry from" in notes[0]
    assert batches(stories_copy, str(tmp_path / "rebuilt.npz"), "epoch", *args)[0].err == ""


def test_a_manifest_whose_counts_are_not_its_shards_is_refused_naming_the_shard(
    stories_copy, tmp_path
):
    shard = edit_consistently(stories_copy, 3, "documents", 1)  # the totals add up too

    for _ in range(2):  # a cold cache, then a warm one
        outcome, _ = batches(stories_copy, str(tmp_path / "edited.npz"))
        assert (
            shard["path"] in outcome.error
            and f"manifest says {shard['documents']}" in outcome.error
        )


def test_the_cache_key_holds_what_the_entry_was_built_from(stories_copy):
    manifest_path = os.path.join(stories_copy, formats.MANIFEST_NAME)
    with open(manifest_path) as f:
        manifest = json.load(f)
    inspect(stories_copy)
    entries = sorted(os.listdir(lengths.cache_dir()))
    assert entries == [f"v4-eot{manifest['tokenizer']['eot_id']}-{manifest['dtype']}"]
    kept = {
        name.split("-")[0] for name in os.listdir(os.path.join(lengths.cache_dir(), entries[0]))
    }
    assert kept == {s["sha256"] for s in manifest["shards"]}


@pytest.mark.slow
def test_train_after_a_repaired_shard_trains_on_the_batches_of_a_fresh_cache(
    stories_copy, tmp_path, monkeypatch
):
    from train.metrics import METRICS_NAME, read_rows

    def batch_digests(workdir: str) -> list[str]:
        argv = [
            "--data",
            stories_copy,
            "--workdir",
            workdir,
            *TINY_MODEL,
            "--steps",
            "3",
            "--batch-size",
            "4",
            "--seq-len",
            "32",
            "--eval-batches",
            "0",
            "--log-every",
            "1",
        ]
        assert run_command("train", *argv) == 0
        return [
            r["batch_sha256"]
            for r in read_rows(os.path.join(workdir, METRICS_NAME))
            if "batch_sha256" in r
        ]

    first, second = shard_files(stories_copy)[1:3]
    held = copy_over(second, first)
    inspect(stories_copy)
    restore(first, held)
    cached = batch_digests(str(tmp_path / "cached"))
    fresh(monkeypatch, tmp_path)
    assert cached == batch_digests(str(tmp_path / "fresh"))
