"""Resuming an interrupted run: units whose shards are gone or wrong are run again, a changed
environment is refused before any work, and no manifest ever names a shard that is not there."""

from __future__ import annotations

import json
import os

import pytest

from pipeline.dataset.verify import main as verify_main
from pipeline.prepare import launcher
from pipeline.prepare.execution.worker_environment import package_versions
from pipeline.prepare.planning import make_plan
from pipeline.prepare.write.output_dir import prepare_output_dir
from schemas import formats
from support.corpora import sample_documents, write_text
from support.runs import IN_PROCESS, run_prepare, tree_bytes

pytestmark = pytest.mark.integration  # every test here runs a command, a process or training

ARGS = ["--unit-bytes", "4096"]


def interrupted_before_manifest(corpus: str, out: str) -> None:
    """Every unit run and recorded, then the launcher gone before it wrote the manifest."""
    args, pipeline_args = launcher.parse_args(
        ["--input", corpus, "--output", out, *ARGS, *IN_PROCESS]
    )
    plan = make_plan(args.input, launcher._config(args))
    prepare_output_dir(out, plan, overwrite=False)
    launcher._run_pending(plan, out, pipeline_args, verbose=False)
    assert not os.path.exists(os.path.join(out, formats.MANIFEST_NAME))


def _records(out: str) -> dict[str, dict]:
    units = os.path.join(out, formats.STATE_DIR, formats.UNITS_DIR)
    return {
        name: json.loads(open(os.path.join(units, name)).read())
        for name in sorted(os.listdir(units))
    }


@pytest.fixture
def corpus(tmp_path) -> str:
    return write_text(str(tmp_path / "c.txt"), sample_documents(120))


@pytest.mark.parametrize("damage", ["removed", "truncated"])
def test_a_shard_lost_after_its_unit_finished_is_made_again(corpus, tmp_path, damage):
    clean = str(tmp_path / "clean")
    run_prepare([corpus], clean, *ARGS)
    out = str(tmp_path / "out")
    interrupted_before_manifest(corpus, out)
    shard = os.path.join(out, formats.shard_path("train", 1, len(_records(out))))
    if damage == "removed":
        os.remove(shard)
    else:
        os.truncate(shard, os.path.getsize(shard) // 2)

    run_prepare([corpus], out, *ARGS)
    assert verify_main([out]) == 0
    assert {k: v for k, v in tree_bytes(out).items() if k != formats.RUN_INFO_NAME} == {
        k: v for k, v in tree_bytes(clean).items() if k != formats.RUN_INFO_NAME
    }
    assert json.loads(open(os.path.join(out, formats.RUN_INFO_NAME)).read())["units_run"] == 1


def test_no_manifest_is_written_over_a_missing_shard(corpus, tmp_path):
    from pipeline.prepare.write.finalize import FinalizeError, write_outputs

    out = str(tmp_path / "out")
    interrupted_before_manifest(corpus, out)
    args, _ = launcher.parse_args(["--input", corpus, "--output", out, *ARGS])
    plan = make_plan(args.input, launcher._config(args))
    os.remove(os.path.join(out, formats.shard_path("train", 0, len(plan.units))))
    with pytest.raises(FinalizeError, match="missing"):
        write_outputs(out, plan, {}, package_versions())
    assert not os.path.exists(os.path.join(out, formats.MANIFEST_NAME))


def test_other_package_versions_are_refused_before_any_work(corpus, tmp_path):
    out = str(tmp_path / "out")
    interrupted_before_manifest(corpus, out)
    units = os.path.join(out, formats.STATE_DIR, formats.UNITS_DIR)
    records = _records(out)
    first, second = list(records)[:2]
    old = dict(
        records[first], package_versions={**records[first]["package_versions"], "tiktoken": "0.1.0"}
    )
    with open(os.path.join(units, first), "w") as f:
        f.write(json.dumps(old))
    os.remove(os.path.join(units, second))  # one unit left to run: it must not run

    with pytest.raises(launcher.PrepareError) as error:
        run_prepare([corpus], out, *ARGS)
    message = str(error.value)
    assert "tiktoken 0.1.0" in message and "--overwrite" in message and "\n" not in message
    assert not os.path.exists(os.path.join(units, second)), (
        "no unit may run in a changed environment"
    )
    assert not os.path.exists(os.path.join(out, formats.MANIFEST_NAME))


def test_a_dataset_copied_without_run_info_is_refused_clearly(corpus, tmp_path):
    out = str(tmp_path / "out")
    run_prepare([corpus], out, *ARGS)
    os.remove(os.path.join(out, formats.RUN_INFO_NAME))
    with pytest.raises(launcher.PrepareError, match=r"run_info\.json.*--overwrite"):
        run_prepare([corpus], out, *ARGS)
    assert run_prepare([corpus], out, *ARGS, "--overwrite").totals["train"].documents > 0
