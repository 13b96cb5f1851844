"""Hub datasets resolved to a pinned commit and read in ranges, against the loopback stand-in."""

from __future__ import annotations

import gzip
import json
import os
import socket

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from huggingface_hub import HfFileSystem

from pipeline.prepare.read.hub import (
    HubError,
    hub_file_size,
    open_hub_file,
    resolve_hub_dataset,
)
from support.hub_standin import HubStandIn

pytestmark = pytest.mark.integration  # a loopback server


def write_files(root, files: dict[str, bytes]) -> str:
    for path, data in files.items():
        os.makedirs(os.path.dirname(os.path.join(root, path)), exist_ok=True)
        with open(os.path.join(root, path), "wb") as f:
            f.write(data)
    return str(root)


def parquet_bytes(texts: list[str], row_group_size: int = 10) -> bytes:
    sink = pa.BufferOutputStream()
    pq.write_table(pa.table({"text": texts}), sink, row_group_size=row_group_size)
    return sink.getvalue().to_pybytes()


def jsonl_bytes(texts: list[str]) -> bytes:
    return "".join(json.dumps({"text": t}) + "\n" for t in texts).encode()


def stories(prefix: str, n: int) -> list[str]:
    return [f"{prefix} story {i}: once upon a time" for i in range(n)]


PARQUET_REPO = {
    "README.md": b"# Stories\n",
    ".gitattributes": b"*.parquet filter=lfs diff=lfs merge=lfs -text\n",
    "data/train-00000-of-00002.parquet": parquet_bytes(stories("a", 40)),
    "data/train-00001-of-00002.parquet": parquet_bytes(stories("b", 25)),
    "data/validation-00000-of-00001.parquet": parquet_bytes(stories("v", 5)),
}

CONFIGS_README = b"""---
configs:
- config_name: stories
  data_files:
  - split: train
    path: "stories/part-*.jsonl"
  - split: validation
    path: "stories/held_out.jsonl"
- config_name: poems
  data_files: "poems/*.jsonl"
---
# Two configs
"""

CONFIGS_REPO = {
    "README.md": CONFIGS_README,
    "stories/part-0.jsonl": jsonl_bytes(stories("s0", 30)),
    "stories/part-1.jsonl": jsonl_bytes(stories("s1", 7)),
    "stories/held_out.jsonl": jsonl_bytes(stories("h", 3)),
    "poems/roses.jsonl": jsonl_bytes(["roses are red", "violets are blue"]),
    "notes.txt": b"not data: no config names it\n",
}


def pinned(repo: str, sha: str, path: str) -> str:
    return f"hf://datasets/{repo}@{sha}/{path}"


def as_a_fresh_worker() -> None:
    """A worker process starts with nothing cached: forget the listings resolution left here."""
    HfFileSystem.clear_instance_cache()


def data_downloads(standin: HubStandIn) -> list[str]:
    """Requests that fetched a data file's content (the card and metadata files are expected)."""
    return [
        r.path
        for r in standin.requests
        if "/resolve/" in r.path and r.method == "GET" and not r.path.endswith(".md")
    ]


def test_parquet_splits_resolve_to_the_commit_without_reading_data(hub, tmp_path):
    sha = hub.commit("org/stories", write_files(tmp_path / "repo", PARQUET_REPO))

    train = resolve_hub_dataset("org/stories", split="train")
    validation = resolve_hub_dataset("org/stories", split="validation")

    assert (train.repo_id, train.revision, train.config_name) == ("org/stories", sha, "default")
    assert train.split == "train"
    expected = [p for p in sorted(PARQUET_REPO) if p.startswith("data/train-")]
    assert [f.path for f in train.files] == expected
    assert [f.url for f in train.files] == [pinned("org/stories", sha, p) for p in expected]
    assert [f.size for f in train.files] == [len(PARQUET_REPO[p]) for p in expected]
    assert {f.format for f in train.files} == {"parquet"}
    assert [f.path for f in validation.files] == ["data/validation-00000-of-00001.parquet"]
    assert data_downloads(hub) == []


def test_card_configs_choose_the_files(hub, tmp_path):
    sha = hub.commit("org/mixed", write_files(tmp_path / "repo", CONFIGS_REPO))

    stories_train = resolve_hub_dataset("org/mixed", name="stories", split="train")
    stories_validation = resolve_hub_dataset("org/mixed", name="stories", split="validation")
    poems = resolve_hub_dataset("org/mixed", name="poems", split="train")

    assert stories_train.revision == sha and stories_train.config_name == "stories"
    assert [(f.path, f.format, f.size) for f in stories_train.files] == [
        (p, "jsonl", len(CONFIGS_REPO[p])) for p in ("stories/part-0.jsonl", "stories/part-1.jsonl")
    ]
    assert [f.path for f in stories_validation.files] == ["stories/held_out.jsonl"]
    assert [(f.path, f.format) for f in poems.files] == [("poems/roses.jsonl", "jsonl")]
    with pytest.raises(
        HubError, match=r"several configs \(\['stories', 'poems'\]\); pass --hf-name"
    ):
        resolve_hub_dataset("org/mixed", split="train")
    with pytest.raises(
        HubError, match=r"no config 'songs' \(configs: \['stories', 'poems'\]\); pass"
    ):
        resolve_hub_dataset("org/mixed", name="songs", split="train")


def test_jsonl_repo_with_compressed_files(hub, tmp_path):
    import zstandard

    files = {
        "train-0.jsonl": jsonl_bytes(stories("p", 10)),
        "train-1.jsonl.gz": gzip.compress(jsonl_bytes(stories("g", 10)), mtime=0),
        "train-2.jsonl.zst": zstandard.ZstdCompressor().compress(jsonl_bytes(stories("z", 10))),
        "more/deeper/train-3.jsonl": jsonl_bytes(stories("d", 4)),  # found by a recursive listing
        "test.jsonl": jsonl_bytes(stories("t", 2)),
    }
    sha = hub.commit("org/lines", write_files(tmp_path / "repo", files))

    resolved = resolve_hub_dataset("org/lines", split="train")

    assert resolved.revision == sha
    assert [(f.path, f.format, f.size) for f in resolved.files] == [
        (p, "jsonl", len(files[p]))
        for p in (
            "more/deeper/train-3.jsonl",
            "train-0.jsonl",
            "train-1.jsonl.gz",
            "train-2.jsonl.zst",
        )
    ]
    assert [f.path for f in resolve_hub_dataset("org/lines", split="test").files] == ["test.jsonl"]


def test_ranged_reads_fetch_only_what_is_read(hub, tmp_path):
    rng = np.random.default_rng(0)
    big = jsonl_bytes([rng.bytes(300).hex() for _ in range(4000)])  # about 2.4 MB
    sha = hub.commit(
        "org/big", write_files(tmp_path / "repo", {"train.jsonl": big, "README.md": b"hi"})
    )
    url = resolve_hub_dataset("org/big").files[0].url
    as_a_fresh_worker()
    hub.requests.clear()

    assert hub_file_size(url) == len(big)
    with open_hub_file(url) as f:
        for offset, length in [
            (1_000_000, 5000),
            (17, 100),
            (len(big) - 50, 50),
            (2_000_000, 300_000),
        ]:
            f.seek(offset)
            assert f.read(length) == big[offset : offset + length]

    reads = [r for r in hub.requests if r.method == "GET" and "/resolve/" in r.path]
    assert reads and all(r.range is not None and sha in r.path for r in reads)
    assert sum(r.body_bytes for r in reads) < len(big) / 2


def test_parquet_row_groups_read_through_pyarrow(hub, tmp_path):
    hub.commit("org/stories", write_files(tmp_path / "repo", PARQUET_REPO))
    first = resolve_hub_dataset("org/stories").files[0]
    as_a_fresh_worker()

    with open_hub_file(first.url) as f:
        parquet = pq.ParquetFile(f)
        assert parquet.metadata.num_row_groups == 4
        rows = parquet.read_row_groups([2, 3], columns=["text"]).column("text").to_pylist()

    assert rows == stories("a", 40)[20:]


def test_a_new_commit_resolves_anew_while_pinned_urls_keep_their_bytes(hub, tmp_path):
    old = hub.commit(
        "org/moving", write_files(tmp_path / "v1", {"data/train.jsonl": jsonl_bytes(["old"])})
    )
    before = resolve_hub_dataset("org/moving")
    new_files = {
        "data/train.jsonl": jsonl_bytes(["new", "newer"]),
        "data/train-2.jsonl": jsonl_bytes(["x"]),
    }
    new = hub.commit("org/moving", write_files(tmp_path / "v2", new_files))

    after = resolve_hub_dataset("org/moving")
    again = resolve_hub_dataset("org/moving", revision=old)

    assert new != old
    assert (before.revision, after.revision, again.revision) == (old, new, old)
    assert [f.path for f in after.files] == ["data/train-2.jsonl", "data/train.jsonl"]
    assert again.files == before.files
    as_a_fresh_worker()
    with open_hub_file(before.files[0].url) as f:
        assert f.read() == jsonl_bytes(["old"])
    with open_hub_file(after.files[1].url) as f:
        assert f.read() == new_files["data/train.jsonl"]


def test_a_gated_repo_needs_a_token(hub, tmp_path, monkeypatch):
    hub.commit(
        "org/gated", write_files(tmp_path / "repo", {"train.jsonl": jsonl_bytes(["secret"])})
    )
    hub.gate("org/gated", token="hf_granted")

    with pytest.raises(HubError, match=r"'org/gated'.*gated.*set HF_TOKEN"):
        resolve_hub_dataset("org/gated")

    monkeypatch.setenv("HF_TOKEN", "hf_granted")
    url = resolve_hub_dataset("org/gated").files[0].url
    as_a_fresh_worker()
    with open_hub_file(url) as f:
        assert f.read() == jsonl_bytes(["secret"])


def card(yaml: str) -> bytes:
    return f"---\n{yaml}---\n".encode()


@pytest.mark.parametrize(
    "repo, files, kwargs, message",
    [
        (
            "org/absent",
            None,
            {},
            r"'org/absent' does not exist or is private; check the id, or set HF_TOKEN",
        ),
        ("not a repo id", None, {}, r"not a Hugging Face dataset id"),
        (
            "org/stories",
            PARQUET_REPO,
            {"split": "test"},
            r"no split 'test' \(splits: \['train', 'validation'\]\); pass --hf-split",
        ),
        ("org/stories", PARQUET_REPO, {"revision": "0" * 40}, r"no revision '0{40}'"),
        (
            "org/tables",
            {"train.csv": b"a\nb\n"},
            {},
            r"'csv' builder; only \['arrow', 'json', 'parquet', 'text'\]",
        ),
        (
            "org/packed",
            {"train.jsonl.bz2": b"BZh9"},
            {},
            r"with the 'json' builder, but \S+/train.jsonl.bz2 is not named "
            r"\.jsonl/\.json/\.ndjson \(plain or compressed as \.gz/\.zst\)",
        ),
        (
            "org/mixed",
            {
                "README.md": card(
                    "configs:\n- config_name: a\n  data_files: a.jsonl\n"
                    "- config_name: b\n  data_files: b.txt\n"
                ),
                "a.jsonl": b"{}\n",
                "b.txt": b"b\n",
            },
            {"name": "b"},
            r"all the repo's data files with the 'json' builder, but \S+/b.txt is not named",
        ),
        (
            "org/empty",
            {"README.md": b"# nothing\n"},
            {},
            r"cannot resolve its data files: .*any data files",
        ),
        (
            "org/nested",
            {
                "README.md": card(
                    "configs:\n- config_name: default\n  data_files: a.json\n  field: rows\n"
                ),
                "a.json": b'{"rows": []}',
            },
            {},
            r"config 'default' sets \{'field': 'rows'\}, which is not supported",
        ),
        (
            "org/filtered",
            {
                "README.md": card(
                    "configs:\n- config_name: default\n  data_files: a.parquet\n"
                    "  filters: [[id, '>', 2]]\n"
                ),
                "a.parquet": parquet_bytes(["x"]),
            },
            {},
            r"config 'default' sets \{'filters': .*\}, which is not supported",
        ),
    ],
)
def test_clear_errors(hub, tmp_path, repo, files, kwargs, message):
    if files is not None:
        hub.commit(repo, write_files(tmp_path / "repo", files))
    with pytest.raises(HubError, match=message):
        resolve_hub_dataset(repo, **kwargs)


@pytest.mark.parametrize("offline", [False, True])
def test_no_network_is_a_clear_error(hub, monkeypatch, offline):
    import datasets.config
    import huggingface_hub.constants

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
    monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT", dead)
    monkeypatch.setattr(datasets.config, "HF_ENDPOINT", dead)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", offline)

    with pytest.raises(
        HubError, match=r"cannot reach the Hugging Face Hub .*'org/stories'.*HF_HUB_OFFLINE"
    ):
        resolve_hub_dataset("org/stories")


def test_only_pinned_urls_of_existing_files_are_read(hub, tmp_path):
    sha = hub.commit("org/stories", write_files(tmp_path / "repo", PARQUET_REPO))

    with pytest.raises(HubError, match="not pinned to a commit"):
        open_hub_file("hf://datasets/org/stories/data/train-00000-of-00002.parquet")
    with pytest.raises(HubError, match="not pinned to a commit"):
        hub_file_size("hf://datasets/org/stories@main/data/train-00000-of-00002.parquet")
    with pytest.raises(HubError, match="not on the Hub"):
        open_hub_file(pinned("org/stories", sha, "data/absent.parquet"))
    with pytest.raises(HubError, match="not on the Hub"):
        hub_file_size(pinned("org/stories", "f" * 40, "data/train-00000-of-00002.parquet"))
