"""Damage done to a prepared directory as accidents do it, and the commands run on it in-process.

For the tests of damaged directories and of the lengths cache: a command's status and what it
printed (`Outcome`), the batches `tokshards batches` writes, and shards swapped as a careless copy
swaps them. The fixtures `stories_to_damage` (a prepared directory of 12 shards, per module) and
`stories_copy` (a copy of it to damage, with a lengths cache of its own) are a plugin of the root
conftest.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import os
import shutil

import numpy as np
import pytest

from pipeline.load.lengths import CACHE_ENV
from schemas import formats


@dataclasses.dataclass(frozen=True)
class Outcome:
    status: int
    out: str
    err: str

    @property
    def error(self) -> str:
        """The one line a failed command printed to stderr (asserts there is exactly one)."""
        lines = [line for line in self.err.splitlines() if line.strip()]
        assert self.status != 0, f"expected a failure, got status 0: {self.out[-500:]}"
        assert "Traceback" not in self.err, self.err
        assert len(lines) == 1, f"expected one line on stderr, got {len(lines)}:\n{self.err}"
        return lines[0]


def run(name: str, argv: list[str]) -> Outcome:
    """A `tokshards` command run in this process as the console script runs it, with what it
    printed."""
    from support.runs import run_command

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status = run_command(name, *argv)
        except SystemExit as e:  # argparse's refusals
            status = e.code if isinstance(e.code, int) else 2
    return Outcome(status, out.getvalue(), err.getvalue())


def inspect(data_dir: str, *args: str) -> Outcome:
    return run("inspect", [data_dir, "--documents", "0", *args])


def verify(data_dir: str) -> Outcome:
    return run("verify", [data_dir])


def batches(
    data_dir: str, out: str, take: str = "30", *args: str
) -> tuple[Outcome, dict[str, np.ndarray] | None]:
    """`tokshards batches` of 4 x 32 tokens, and the arrays it wrote (None when it failed)."""
    argv = [data_dir, "--seq-len", "32", "--batch-size", "4", "--take", take, "--out", out, *args]
    outcome = run("batches", argv)
    if outcome.status:
        return outcome, None
    with np.load(out) as arrays:
        return outcome, dict(arrays)


def lengths_report(outcome: Outcome) -> str:
    """What `inspect` printed of the split's document lengths (the manifest's account left out)."""
    assert outcome.status == 0, outcome.err
    return outcome.out[outcome.out.index(" document lengths in tokens") :]


def small_stories(root: str, seed: int = 1) -> str:
    """A prepared directory of 300 stories in 12 train shards, all of one size (ArrayRecord pads
    small files to 64 KiB blocks), as a same-size mix-up needs."""
    from pipeline.corpus import write_corpus
    from support.runs import run_prepare

    write_corpus(os.path.join(root, "stories.txt"), 300, seed=seed)
    out = os.path.join(root, "out")
    stories = os.path.join(root, "stories.txt")
    run_prepare([stories], out, "--unit-bytes", "8192", "--record-tokens", "256")
    return out


@pytest.fixture(scope="module")
def stories_to_damage(tmp_path_factory) -> str:
    """`small_stories`, prepared once per module that damages copies of it."""
    return small_stories(str(tmp_path_factory.mktemp("stories")))


@pytest.fixture
def stories_copy(stories_to_damage, tmp_path, monkeypatch) -> str:
    """A copy of the stories to damage, with a lengths cache of its own."""
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    copy = str(tmp_path / "data")
    shutil.copytree(stories_to_damage, copy)
    return copy


def swap(a: str, b: str) -> None:
    """Exchanges two files' contents, as a copy to the wrong names does."""
    scratch = a + ".swap"
    os.replace(a, scratch)
    os.replace(b, a)
    os.replace(scratch, b)


def copy_over(source: str, target: str) -> bytes:
    """Writes `source`'s bytes over `target`; returns what `target` held."""
    with open(target, "rb") as f:
        held = f.read()
    shutil.copyfile(source, target)
    return held


def restore(target: str, held: bytes) -> None:
    with open(target, "wb") as f:
        f.write(held)


def edit_consistently(data_dir: str, shard: int, field: str, delta: int) -> dict:
    """Changes a count of the manifest's `shard`-th entry and the totals that sum it (its split's,
    and the first input's where inputs count it), so that the manifest still agrees with itself and
    only the shard, read, tells; returns the edited entry."""
    path = os.path.join(data_dir, formats.MANIFEST_NAME)
    with open(path) as f:
        manifest = json.load(f)
    entry = manifest["shards"][shard]
    entry[field] += delta
    manifest["totals"][entry["split"]][field] += delta
    inputs = manifest["inputs"]
    if inputs and inputs[0].get(field) is not None:
        inputs[0][field] += delta
    with open(path, "w") as f:
        json.dump(manifest, f)
    return entry


def swap_two_lengths(docs_file: str) -> None:
    """Two neighbouring documents of other lengths exchanged in a lengths cache entry
    (`SHA256-docs.npy`), the totals unchanged, as a lying entry would hold them."""
    docs = np.load(docs_file)
    at = int(np.flatnonzero(docs[:-1] != docs[1:])[0])
    docs[[at, at + 1]] = docs[[at + 1, at]]
    np.save(docs_file, docs)
