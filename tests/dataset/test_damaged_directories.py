"""A damaged prepared directory says so: `inspect`, `verify`, `batches` and `train` end in one line
naming the file and the fix, with a non-zero status, whatever the lengths cache holds; or, where
the damage does not touch what they read, in the output of the intact directory. Never in other
batches, never in a traceback."""

from __future__ import annotations

import json
import os
import shutil
import tempfile

import numpy as np
import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from pipeline.load.lengths import CACHE_ENV
from schemas import formats
from support.damage import (
    Outcome,
    batches,
    edit_consistently,
    inspect,
    lengths_report,
    run,
    swap_two_lengths,
    verify,
)
from support.runs import TINY_MODEL
from support.synthetic import unique_documents, write_prepared

# Every test runs the commands on a prepared directory, or trains.
pytestmark = pytest.mark.integration

SHARD = "train/data.array_record-00002-of-00012"


def train(data_dir: str, workdir: str) -> Outcome:
    return run(
        "train",
        [
            "--data",
            data_dir,
            "--workdir",
            workdir,
            *TINY_MODEL,
            "--steps",
            "2",
            "--batch-size",
            "4",
            "--seq-len",
            "32",
        ],
    )


def cut_short(path: str, keep: float = 0.5) -> None:
    with open(path, "r+b") as f:
        f.truncate(int(os.path.getsize(path) * keep))


@pytest.mark.parametrize("warm", [True, False], ids=["cached", "cold"])
@pytest.mark.parametrize("damage", ["missing", "truncated"])
def test_a_missing_or_truncated_shard_is_one_line_in_every_command(
    stories_copy, tmp_path, warm, damage
):
    if warm:
        assert inspect(stories_copy).status == 0
    path = os.path.join(stories_copy, SHARD)
    os.remove(path) if damage == "missing" else cut_short(path)

    for outcome in (
        inspect(stories_copy),
        batches(stories_copy, str(tmp_path / "b.npz"))[0],
        train(stories_copy, str(tmp_path / "run")),
    ):
        assert SHARD in outcome.error and f"tokshards verify {stories_copy}" in outcome.error
    checked = verify(stories_copy)
    assert checked.status == 1 and SHARD in checked.out and "prepare" in checked.error


def test_a_truncated_manifest_is_one_line_in_every_command(stories_copy, tmp_path):
    cut_short(os.path.join(stories_copy, formats.MANIFEST_NAME))

    for outcome in (
        inspect(stories_copy),
        verify(stories_copy),
        batches(stories_copy, str(tmp_path / "b.npz"))[0],
        train(stories_copy, str(tmp_path / "run")),
    ):
        assert formats.MANIFEST_NAME in outcome.error and "not valid JSON" in outcome.error


def test_verify_finds_a_stray_shard(stories_copy):
    stray = os.path.join(stories_copy, "train", "data.array_record-00012-of-00012")
    shutil.copyfile(os.path.join(stories_copy, SHARD), stray)

    checked = verify(stories_copy)
    assert (
        checked.status == 1
        and "not in the manifest: train/data.array_record-00012-of-00012" in checked.out
    )
    assert "prepare" in checked.error


def test_verify_finds_totals_that_do_not_add_up(stories_copy):
    path = os.path.join(stories_copy, formats.MANIFEST_NAME)
    with open(path) as f:
        manifest = json.load(f)
    manifest["totals"]["train"]["tokens"] += 1000
    with open(path, "w") as f:
        json.dump(manifest, f)

    assert "totals.train.tokens" in verify(stories_copy).error
    assert "totals.train.tokens" in inspect(stories_copy).error


def test_verify_reads_the_counts_a_consistent_edit_leaves_wrong(stories_copy, tmp_path):
    """A shard's documents raised by one, with its split's and input's totals: the manifest agrees
    with itself, and only the shard, read, says otherwise, to every reader and to `verify`."""
    shard = edit_consistently(stories_copy, 3, "documents", 1)

    refusals = (
        inspect(stories_copy),
        batches(stories_copy, str(tmp_path / "b.npz"))[0],
        verify(stories_copy),
    )
    for outcome in refusals:
        assert outcome.status == 1 and shard["path"] in outcome.error
    assert f"manifest says {shard['documents']}" in refusals[-1].out


# --- random damage ---------------------------------------------------------------------------


def synthetic(root: str, first_id: int) -> str:
    """Two splits in shards of one size; `first_id` sets the tokens, not the shape."""
    rng = np.random.default_rng(0)
    documents = unique_documents([int(n) for n in rng.integers(1, 120, 160)], first_id=first_id)
    write_prepared(
        root,
        {"train": documents[:120], "validation": documents[120:]},
        record_tokens=64,
        num_shards=3,
    )
    return root


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> dict:
    """The intact directory, another of the same shape (whose manifest is the foreign one), and what
    the commands give on the intact one with a cache of their own."""
    root = tmp_path_factory.mktemp("pristine")
    data = synthetic(str(root / "data"), first_id=2)
    foreign = synthetic(str(root / "foreign"), first_id=5000)
    previous = os.environ[CACHE_ENV]
    os.environ[CACHE_ENV] = str(root / "cache")
    try:
        expected = {
            packing: batches(data, str(root / f"{packing}.npz"), "epoch", "--packing", packing)
            for packing in PACKINGS
        }
        assert all(outcome.status == 0 for outcome, _ in expected.values())
        return {
            "data": data,
            "foreign": foreign,
            "batches": {packing: arrays for packing, (_, arrays) in expected.items()},
            "lengths": lengths_report(inspect(data)),
        }
    finally:
        os.environ[CACHE_ENV] = previous


SHARDS = [
    f"{split}/data.array_record-0000{i}-of-00003" for split in formats.SPLITS for i in range(3)
]
PACKINGS = ("concat", "document")
COUNTS = ("documents", "tokens", "records", "bytes")


def _leaves(value, path=()):
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _leaves(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _leaves(item, (*path, index))
    else:
        yield path


def _edited(value, how: int):
    """Another value of a manifest field, as a hand edit or a bit of rot makes one."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + (-1, 1, 7, 1000)[how % 4]
    if isinstance(value, float):
        return value + 0.25
    if isinstance(value, str):
        if len(value) == 64:  # a hash: still one, of other bytes
            return value[:-1] + ("0" if value[-1] != "0" else "1")
        return value + "x" if how % 2 else value[:-1]
    return 0  # null


def damage_cache(cache: str, kind: str, a: int, b: int, fraction: float) -> None:
    """Damage to the lengths cache an earlier run left: lengths that lie (the totals kept), a bit
    flipped or a file cut short anywhere in it."""
    files = sorted(os.path.join(root, name) for root, _, names in os.walk(cache) for name in names)
    if kind == "cache lengths":
        docs = [f for f in files if f.endswith("-docs.npy")]
        swap_two_lengths(docs[a % len(docs)])
        return
    path = files[a % len(files)]
    if kind == "cache cut":
        cut_short(path, fraction)
    elif os.path.getsize(path):
        with open(path, "r+b") as f:
            f.seek(int(os.path.getsize(path) * fraction))
            byte = f.read(1)[0]
            f.seek(int(os.path.getsize(path) * fraction))
            f.write(bytes([byte ^ (1 << b % 8)]))


def damage(data_dir: str, foreign_dir: str, kind: str, a: int, b: int, fraction: float) -> None:
    manifest_path = os.path.join(data_dir, formats.MANIFEST_NAME)
    shard = os.path.join(data_dir, SHARDS[a % len(SHARDS)])
    size = os.path.getsize(shard)
    if kind == "delete":
        os.remove(shard)
    elif kind == "truncate":
        cut_short(shard, fraction)
    elif kind == "swap":
        other = os.path.join(data_dir, SHARDS[(a + 1 + b % (len(SHARDS) - 1)) % len(SHARDS)])
        os.replace(shard, shard + ".x")
        os.replace(other, shard)
        os.replace(shard + ".x", other)
    elif kind == "flip":
        with open(shard, "r+b") as f:
            f.seek(int(size * fraction))
            byte = f.read(1)[0]
            f.seek(int(size * fraction))
            f.write(bytes([byte ^ (1 << b % 8)]))
    elif kind == "edit":
        with open(manifest_path) as f:
            manifest = json.load(f)
        leaves = list(_leaves(manifest))
        path = leaves[a % len(leaves)]
        parent = manifest
        for key in path[:-1]:
            parent = parent[key]
        parent[path[-1]] = _edited(parent[path[-1]], b)
        with open(manifest_path, "w") as f:
            json.dump(manifest, f, indent=2, sort_keys=True)
    elif kind == "consistent edit":  # the manifest still agrees with itself
        edit_consistently(data_dir, a % len(SHARDS), COUNTS[b % 4], (-1, 1, 7)[b // 4 % 3])
    elif kind == "cut manifest":
        cut_short(manifest_path, fraction)
    elif kind == "foreign manifest":
        shutil.copyfile(os.path.join(foreign_dir, formats.MANIFEST_NAME), manifest_path)


FILE_DAMAGE = ("delete", "truncate", "swap", "flip")
CACHE_DAMAGE = ("cache lengths", "cache flip", "cache cut")
DAMAGE = st.tuples(
    st.sampled_from(
        [
            *FILE_DAMAGE,
            "edit",
            "consistent edit",
            "cut manifest",
            "foreign manifest",
            *CACHE_DAMAGE,
        ]
    ),
    st.integers(0, 10**6),
    st.integers(0, 10**6),
    st.floats(0, 1, exclude_max=True),
)


@settings(
    max_examples=60, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)
@given(damaged=DAMAGE, warm=st.booleans(), packing=st.sampled_from(PACKINGS))
# Every run tries the damage that was once silent: a train shard's documents raised with its
# totals (readers refused, `verify` passed), and lengths that lie in an entry (other rows).
@example(damaged=("consistent edit", 0, 1, 0.0), warm=False, packing="concat")
@example(damaged=("cache lengths", 0, 0, 0.0), warm=True, packing="document")
def test_random_damage_ends_in_one_line_or_in_the_intact_output(pristine, damaged, warm, packing):
    """No damage changes a batch silently, a damaged cache is rebuilt (never refused), and `verify`
    refuses every directory a reader refuses."""
    kind = damaged[0]
    previous = os.environ[CACHE_ENV]
    with tempfile.TemporaryDirectory() as scratch:
        cache = os.environ[CACHE_ENV] = os.path.join(scratch, "cache")
        try:
            data = os.path.join(scratch, "data")
            shutil.copytree(pristine["data"], data)
            if warm or kind in CACHE_DAMAGE:  # the cache made from the intact files, as an
                # earlier run leaves it
                warmed = batches(
                    data, os.path.join(scratch, "w.npz"), "epoch", "--packing", packing
                )
                assert warmed[0].status == 0
            if kind in CACHE_DAMAGE:
                damage_cache(cache, *damaged)
            else:
                damage(data, pristine["foreign"], *damaged)

            outcome, arrays = batches(
                data, os.path.join(scratch, "b.npz"), "epoch", "--packing", packing
            )
            event(f"{kind}: batches {'refused' if outcome.status else 'intact'}")
            if outcome.status == 0:
                assert "Traceback" not in outcome.err
                expected = pristine["batches"][packing]
                assert arrays.keys() == expected.keys()
                for name, values in expected.items():
                    np.testing.assert_array_equal(arrays[name], values, err_msg=name)
            else:
                assert outcome.error.startswith("batches: error:")
            shown = inspect(data)
            if shown.status == 0:
                assert lengths_report(shown) == pristine["lengths"]
            else:
                assert shown.error.startswith("inspect: error:")
            checked = verify(data)
            if checked.status:
                assert checked.error.startswith("verify:")
            if kind in FILE_DAMAGE or outcome.status or shown.status:
                assert checked.status == 1
            if kind in CACHE_DAMAGE:
                assert outcome.status == shown.status == checked.status == 0
        finally:
            os.environ[CACHE_ENV] = previous
