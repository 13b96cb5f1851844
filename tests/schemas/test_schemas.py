"""The manifest contract: JSON round trip, schema checks, and the exported schema file."""

from __future__ import annotations

import dataclasses
import json

import pytest

from schemas.__main__ import SCHEMA_FILE, exported_text
from schemas.manifest import (
    Manifest,
    ManifestError,
    ShardInfo,
    TokenizerInfo,
    split_totals,
)
from schemas.prepare_config import PrepareConfig
from schemas.records import decode_record, encode_record, token_dtype_name


def _manifest() -> Manifest:
    shards = (ShardInfo("train", "train/x", 0, 2, 3, 10, 100, "0" * 64),)
    return Manifest(
        tokenizer=TokenizerInfo("gpt2", "a" * 64, 50257, 50256, "0.14.0"),
        dtype="uint16",
        config=PrepareConfig(),
        inputs=(),
        num_units=1,
        shards=shards,
        skipped={"empty_document": 1},
        counts={},
        totals=split_totals(shards),
        package_versions={"python": "3.11"},
    )


def test_exported_schema_file_is_current():
    with open(SCHEMA_FILE) as f:
        assert f.read() == exported_text(), "run `python -m schemas` after changing the manifest"


def test_round_trip_is_exact():
    manifest = _manifest()
    assert Manifest.from_json(manifest.to_json()) == manifest
    assert Manifest.from_json(manifest.to_json()).to_json() == manifest.to_json()


@pytest.mark.parametrize(
    "mutate,message",
    [
        (lambda d: d.update(version=99), "version 99 is not supported"),
        (lambda d: d.update(dtype="int8"), "dtype"),
        (lambda d: d["shards"][0].update(sha256="xyz"), "shards/0/sha256"),
        (lambda d: d.pop("tokenizer"), "tokenizer"),
        (lambda d: d["config"].update(surprise=1), "config"),
    ],
)
def test_invalid_manifests_are_refused_with_where(mutate, message):
    data = json.loads(_manifest().to_json())
    mutate(data)
    with pytest.raises(ManifestError, match=message):
        Manifest.from_json(json.dumps(data))


def test_config_checks_values():
    with pytest.raises(ValueError, match="validation_fraction"):
        PrepareConfig(validation_fraction=1.0)
    with pytest.raises(ValueError, match="format"):
        PrepareConfig(format="csv")
    # A copy with a field changed is checked as a new config is.
    with pytest.raises(ValueError, match="unit_bytes"):
        dataclasses.replace(PrepareConfig(), unit_bytes=4095)
    with pytest.raises(ValueError, match="near_bands times near_rows"):
        dataclasses.replace(PrepareConfig(), near_bands=1, near_rows=1025)
    # The bounds themselves are allowed.
    PrepareConfig(
        validation_fraction=0.0,
        unit_bytes=4096,
        record_tokens=16,
        max_document_bytes=1024,
        filter_max_document_bytes=1024,
        near_bands=1,
        near_rows=1024,
    )


def test_dtype_rule_and_record_round_trip():
    assert token_dtype_name(50257) == "uint16"
    assert token_dtype_name(65536) == "uint16"
    assert token_dtype_name(200019) == "uint32"
    import numpy as np

    tokens = np.array([0, 1, 65535], dtype=np.uint32)
    assert decode_record(encode_record(tokens, "uint16"), "uint16").tolist() == [0, 1, 65535]
    assert (
        encode_record(tokens, "uint16")[:2] == b"\x00\x00"
        and encode_record(tokens, "uint16")[4:] == b"\xff\xff"
    )
