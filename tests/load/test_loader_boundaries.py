"""The loader follows the manifest's boundary rule: with BOS before and EOS after each document,
document packing starts every segment at a BOS, and sources with other rules do not mix."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from pipeline.load import LoaderConfig, make_iterator, open_prepared
from pipeline.load.errors import LoaderError
from pipeline.load.mixture import check_compatible
from support.batches import take
from support.synthetic import EOT_ID, unique_documents, write_prepared

BOS_ID = 2


def test_document_packing_starts_segments_at_the_bos(tmp_path):
    rng = np.random.default_rng(3)
    documents = [
        np.append(BOS_ID, d)
        for d in unique_documents([int(n) for n in rng.integers(3, 20, 400)], first_id=10)
    ]
    write_prepared(str(tmp_path), {"train": documents}, n_vocab=5000)
    config = LoaderConfig(
        str(tmp_path),
        seq_len=32,
        global_batch_size=4,
        shard_index=0,
        shard_count=1,
        packing="document",
    )
    starts = 0
    for batch in take(make_iterator(config), 10):
        first = (batch["positions"] == 0) & (batch["segment_ids"] > 0)
        assert (batch["targets"][first] == BOS_ID).all()
        assert (batch["inputs"][first] == EOT_ID).all(), "a BOS follows the document before's EOS"
        starts += int(first.sum())
    assert starts > 40


def test_sources_with_other_boundary_rules_or_libraries_do_not_mix(tmp_path):
    manifest = write_prepared(str(tmp_path), {"train": unique_documents([5] * 10)}, n_vocab=5000)
    assert open_prepared(str(tmp_path)) == manifest
    for change in ({"bos_id": BOS_ID}, {"library": "tokenizers"}, {"vocab_sha256": "1" * 64}):
        other = dataclasses.replace(
            manifest, tokenizer=dataclasses.replace(manifest.tokenizer, **change)
        )
        with pytest.raises(LoaderError, match="do not share one tokenizer"):
            check_compatible(["a", "b"], [manifest, other])
    renamed = dataclasses.replace(
        manifest, tokenizer=dataclasses.replace(manifest.tokenizer, name="r50k_base")
    )
    check_compatible(["a", "b"], [manifest, renamed])  # one table under two names
