"""What prepare and inspect say about the last wrong inputs: an empty input named, skips pointed to
rejects.jsonl only where it records them, a misspelt runner refused before anything is written, and
no bytes-per-token figure that divides removed documents' bytes by the tokens kept."""

from __future__ import annotations

import os
import re

import pytest

from pipeline.prepare.execution.beam_options import check_runner_name
from pipeline.prepare.stages import PrepareError
from schemas import formats
from support.corpora import write_jsonl, write_text
from support.damage import inspect
from support.runs import run_command, run_prepare


@pytest.mark.integration
def test_an_empty_input_is_named(tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_bytes(b"")
    with pytest.raises(PrepareError, match=f"no training data: the input {empty} is empty"):
        run_prepare([str(empty)], str(tmp_path / "out"))


@pytest.mark.integration
def test_empty_inputs_are_named_with_how_many(tmp_path):
    paths = []
    for name in ("a.txt", "b.txt", "c.txt", "d.txt"):
        (tmp_path / name).write_bytes(b"")
        paths.append(str(tmp_path / name))
    with pytest.raises(
        PrepareError, match="the 4 inputs are empty: .*a.txt, .*b.txt, .*c.txt and 1 more"
    ):
        run_prepare(paths, str(tmp_path / "out"))


@pytest.mark.integration
def test_blank_documents_are_not_sent_to_rejects_jsonl_which_does_not_hold_them(tmp_path):
    blank = write_text(str(tmp_path / "blank.txt"), ["   ", "\t", ""])
    with pytest.raises(PrepareError) as raised:
        run_prepare([blank], str(tmp_path / "out"))
    message = str(raised.value)
    assert "3 empty_document" in message and blank in message
    assert formats.REJECTS_NAME not in message
    with open(tmp_path / "out" / formats.REJECTS_NAME) as f:
        assert f.read() == ""


@pytest.mark.integration
def test_inspect_points_to_rejects_jsonl_only_for_the_skips_it_records(tmp_path):
    corpus = tmp_path / "c.jsonl"
    write_jsonl(str(corpus), ["a story about a cat", "   ", "another story about a dog"])
    with open(corpus, "a") as f:
        f.write("{not json\n")
    out = str(tmp_path / "out")
    run_prepare([str(corpus)], out)

    shown = inspect(out).out.splitlines()
    assert "skipped (see rejects.jsonl): malformed_json 1" in shown
    assert "skipped, counted only: empty_document 1" in shown


@pytest.mark.parametrize(
    "runner", ["DirectRunner", "direct", "FnApiRunner", "dataflow", "my.module.Runner"]
)
def test_runners_beam_knows_by_name_or_path_pass(runner):
    check_runner_name([f"--runner={runner}", "--project=p"])


def test_an_unknown_runner_is_refused_naming_the_nearest():
    with pytest.raises(
        ValueError, match="unknown runner --runner=DataflowRuner; did you mean DataflowRunner"
    ):
        check_runner_name(["--runner", "DataflowRuner"])
    with pytest.raises(ValueError, match="unknown runner --runner=Nothing .Beam's runners: "):
        check_runner_name(["--runner=Nothing"])


@pytest.mark.integration
def test_a_misspelt_runner_is_refused_before_anything_is_written(tmp_path, capsys):
    corpus = write_text(str(tmp_path / "c.txt"), ["a story"])
    out = tmp_path / "out"
    status = run_command("prepare", "--input", corpus, "--output", str(out), "--runner=DirectRuner")
    assert status == 2  # a usage error: nothing has run
    err = capsys.readouterr().err
    assert err.strip().splitlines() == [
        "prepare: error: unknown runner --runner=DirectRuner; did you mean DirectRunner?"
    ]
    assert not out.exists()


@pytest.mark.integration
def test_inspect_measures_no_bytes_per_token_over_removed_documents(tmp_path):
    docs = ["the same story about a cat and a dog " * 20] * 5 + [
        "one more story that is only here once"
    ]
    out = str(tmp_path / "out")
    manifest = run_prepare([write_jsonl(str(tmp_path / "c.jsonl"), docs)], out, "--dedup", "exact")
    assert manifest.removed == {"exact_duplicate": 4}

    text = inspect(out).out
    assert not re.search(r"bytes per token: \d|\d bytes per token", text)
    assert (
        "input bytes per token: not measured: the inputs' bytes hold 4 documents that were removed"
        in text
    )
    assert os.path.exists(os.path.join(out, formats.REMOVALS_NAME))
