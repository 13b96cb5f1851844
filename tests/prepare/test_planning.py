"""Work units sized from the inputs alone: a small input still gives every core work, and every
machine cuts the same units, so the shards are the same bytes whatever the core count."""

from __future__ import annotations

import json
import os

import pytest

from pipeline.corpus import write_corpus
from pipeline.prepare.planning import (
    TARGET_UNITS,
    UNIT_FLOOR_BYTES,
    make_plan,
    unit_bytes_for,
)
from schemas import formats
from schemas.prepare_config import DEFAULT_UNIT_BYTES, PrepareConfig
from support.runs import run_outputs, run_prepare

MIB = 2**20


def test_unit_size_is_a_share_of_the_total_between_the_floor_and_unit_bytes():
    config = PrepareConfig()
    assert unit_bytes_for(0, config) == UNIT_FLOOR_BYTES
    assert unit_bytes_for(3 * MIB, config) == UNIT_FLOOR_BYTES
    assert unit_bytes_for(TARGET_UNITS * 5 * MIB, config) == 5 * MIB
    assert (
        unit_bytes_for(TARGET_UNITS * 5 * MIB + 1, config) == 5 * MIB + 1
    )  # rounded up: never a 65th unit
    assert unit_bytes_for(10**12, config) == DEFAULT_UNIT_BYTES
    small = PrepareConfig(unit_bytes=64 * 1024)
    assert unit_bytes_for(3 * MIB, small) == 64 * 1024  # --unit-bytes below the floor is kept


def test_a_few_megabytes_plan_several_units_whatever_the_cores(tmp_path, monkeypatch):
    corpus = str(tmp_path / "stories.txt")
    write_corpus(corpus, 10_000, seed=1)
    size = os.path.getsize(corpus)
    assert size < DEFAULT_UNIT_BYTES // 4  # one unit under a fixed --unit-bytes
    plans = []
    for cores in (1, 64):
        monkeypatch.setattr(os, "cpu_count", lambda cores=cores: cores)
        plans.append(make_plan([corpus], PrepareConfig()))
    assert plans[0].to_json() == plans[1].to_json()
    assert len(plans[0].units) == -(-size // UNIT_FLOOR_BYTES) >= 2


@pytest.mark.integration
def test_a_small_input_prepares_on_two_workers_into_the_same_bytes_as_on_one(tmp_path):
    corpus = str(tmp_path / "stories.txt")
    write_corpus(corpus, 8_000, seed=2)
    one, two = str(tmp_path / "one"), str(tmp_path / "two")
    run_prepare([corpus], one, "--validation-fraction", "0.1")
    manifest = run_prepare(
        [corpus],
        two,
        "--validation-fraction",
        "0.1",
        "--direct_num_workers=2",
        "--direct_running_mode=multi_processing",
    )
    assert manifest.num_units >= 2
    with open(os.path.join(two, formats.RUN_INFO_NAME)) as f:
        assert json.load(f)["worker_processes"] == 2
    assert run_outputs(one) == run_outputs(two)
