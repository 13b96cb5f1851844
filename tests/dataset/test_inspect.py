"""`inspect` and the tokenizer copy a prepared directory keeps: statistics over every document, a
length plot, escaped control characters, and one-line errors in the flags the user typed."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

from pipeline.dataset.inspect import main as inspect_main
from pipeline.dataset.inspect import printable
from pipeline.dataset.manifest_io import read_manifest
from pipeline.tokenization import load_tokenizer
from schemas import formats
from support.corpora import write_jsonl
from support.damage import run, verify
from support.runs import REPO, run_command, run_prepare
from support.tokenizer_files import train_bpe, write_tiktoken_spec
from train.run_tokenizer import RunTokenizer, load_run_tokenizer, write_run_tokenizer


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pipeline", *args], cwd=REPO, capture_output=True, text=True
    )


def _documents(n: int, seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    words = ["the", "cat", "sat", "on", "a", "mat", "and", "looked", "at", "birds"]
    return [" ".join(rng.choice(words, size=int(rng.integers(1, 120)))) for _ in range(n)]


def _shown(stdout: str) -> list[str]:
    """The documents `inspect` printed."""
    return [part.split("\n", 1)[1].removesuffix("\n") for part in stdout.split("--- document ")[1:]]


@pytest.fixture(scope="module")
def bpe(tmp_path_factory) -> str:
    return train_bpe(str(tmp_path_factory.mktemp("bpe")))


@pytest.mark.integration
def test_a_directory_keeps_its_tokenizer_json_and_needs_nothing_else(bpe, tmp_path):
    own = str(tmp_path / "own" / "tokenizer.json")
    os.makedirs(os.path.dirname(own))
    shutil.copy(bpe, own)
    docs = ["Once upon a time there was a cat.", "It sat on a mat.", "The end."]
    corpus = write_jsonl(str(tmp_path / "docs.jsonl"), docs)
    out = str(tmp_path / "out")
    run_prepare([corpus], out, "--tokenizer", own, "--eos-token", "<|endoftext|>")
    manifest = read_manifest(out)
    assert (
        manifest.tokenizer_copy is not None
        and manifest.tokenizer_copy.load_as == "tokenizer/tokenizer.json"
    )
    shutil.rmtree(os.path.dirname(own))  # the file it was prepared with is gone

    shown = _cli("inspect", out, "--documents", "3")
    assert shown.returncode == 0, shown.stderr
    assert sorted(docs) == sorted(_shown(shown.stdout))
    workdir = str(tmp_path / "run")
    write_run_tokenizer(workdir, RunTokenizer.of(manifest, out))
    tokenizer, info = load_run_tokenizer(workdir)
    assert (
        info == manifest.tokenizer
        and tokenizer.decode(tokenizer.encode_ordinary(docs[0])) == docs[0]
    )

    os.remove(os.path.join(out, formats.TOKENIZER_COPY_DIR, "tokenizer.json"))
    broken = _cli("inspect", out)
    assert broken.returncode == 1
    error = broken.stderr.strip().splitlines()
    assert len(error) == 1 and "Traceback" not in broken.stderr
    assert (
        error[0].startswith("inspect: error: cannot show documents:")
        and "tokenizer/tokenizer.json is missing" in error[0]
    )
    with pytest.raises(ValueError, match="tokenizer/tokenizer.json is missing"):
        RunTokenizer.of(manifest, out)


@pytest.mark.integration
def test_a_changed_copy_is_refused(bpe, tmp_path):
    out = str(tmp_path / "out")
    run_prepare(
        [write_jsonl(str(tmp_path / "d.jsonl"), ["a cat", "a mat"])],
        out,
        "--tokenizer",
        bpe,
        "--eos-token",
        "<|endoftext|>",
    )
    with open(os.path.join(out, "tokenizer", "tokenizer.json"), "a") as f:
        f.write(" ")
    with pytest.raises(ValueError, match="SHA-256 differs"):
        RunTokenizer.of(read_manifest(out), out)


@pytest.mark.integration
def test_a_tiktoken_spec_file_is_kept_with_its_rank_file(bpe, tmp_path):
    spec = write_tiktoken_spec(bpe, str(tmp_path / "spec"))
    docs = ["the cat sat", "on the mat"]
    out = str(tmp_path / "out")
    run_prepare([write_jsonl(str(tmp_path / "d.jsonl"), docs)], out, "--tokenizer", spec)
    copied = sorted(read_manifest(out).tokenizer_copy.files)
    assert copied == ["tokenizer/tiktoken.json", "tokenizer/trained.tiktoken"]
    shutil.rmtree(tmp_path / "spec")
    load_tokenizer.cache_clear()  # the process loaded the original; load what the directory holds
    shown = _cli("inspect", out, "--documents", "2")
    assert shown.returncode == 0, shown.stderr
    assert sorted(docs) == sorted(_shown(shown.stdout))


@pytest.mark.integration
def test_verify_names_a_tokenizer_file_flipped_or_deleted_as_inspect_refuses_it(bpe, tmp_path):
    spec = write_tiktoken_spec(bpe, str(tmp_path / "spec"))
    out = str(tmp_path / "out")
    run_prepare(
        [write_jsonl(str(tmp_path / "d.jsonl"), ["the cat", "a mat"])], out, "--tokenizer", spec
    )
    assert verify(out).status == 0
    ranks = os.path.join(out, formats.TOKENIZER_COPY_DIR, "trained.tiktoken")
    with open(ranks, "rb") as f:
        held = f.read()
    flipped = bytearray(held)
    flipped[len(held) // 2] ^= 1
    for damaged in (bytes(flipped), None):
        if damaged is None:
            os.remove(ranks)
        else:
            with open(ranks, "wb") as f:
                f.write(damaged)
        load_tokenizer.cache_clear()
        checked, shown = verify(out), run("inspect", [out])
        assert checked.status == shown.status == 1
        assert "tokenizer/trained.tiktoken" in checked.error
        assert "tokenizer/trained.tiktoken" in shown.error


@pytest.mark.integration
def test_a_named_encoding_has_no_copy_and_overwrite_removes_a_copy(bpe, tmp_path):
    corpus = write_jsonl(str(tmp_path / "d.jsonl"), ["a cat", "a mat"])
    out = str(tmp_path / "out")
    run_prepare([corpus], out, "--tokenizer", bpe, "--eos-token", "<|endoftext|>")
    assert os.listdir(os.path.join(out, "tokenizer")) == ["tokenizer.json"]
    assert run_prepare([corpus], out, "--overwrite").tokenizer_copy is None
    assert not os.path.exists(os.path.join(out, "tokenizer"))


@pytest.mark.integration
def test_statistics_cover_every_document_of_every_input(encoding, tmp_path, capsys):
    first, second = _documents(700, seed=1), _documents(300, seed=2)
    inputs = [
        write_jsonl(str(tmp_path / "a.jsonl"), first),
        write_jsonl(str(tmp_path / "b.jsonl"), second),
    ]
    out = str(tmp_path / "out")
    manifest = run_prepare(inputs, out, "--record-tokens", "64")
    assert manifest.totals["train"].records > 200  # more than the old sample of 200 records
    assert inspect_main([out, "--documents", "0"]) == 0
    shown = capsys.readouterr().out

    lengths = np.array([len(encoding.encode_ordinary(d)) + 1 for d in first + second])
    assert f"({len(lengths)} documents)" in shown
    expected = ", ".join(
        f"p{p} {int(v)}"
        for p, v in zip(
            (1, 10, 50, 90, 99), np.percentile(lengths, (1, 10, 50, 90, 99), method="lower")
        )
    )
    assert f"min {lengths.min()}, {expected}, max {lengths.max()}" in shown
    bins = [re.match(r"\s+\d+-\d+\s+(\d+)", line) for line in shown.splitlines()]
    assert sum(int(b[1]) for b in bins if b) == len(lengths)
    for path, docs in zip(inputs, (first, second)):
        tokens = sum(len(encoding.encode_ordinary(d)) + 1 for d in docs)
        size = os.path.getsize(path)
        assert (
            f"{path} (jsonl, {size} bytes): {len(docs)} documents, {tokens} tokens, "
            f"{size / tokens:.3f} bytes per token" in shown
        )


@pytest.mark.integration
def test_skipped_and_removed_are_listed_by_reason(tmp_path, capsys):
    path = tmp_path / "d.jsonl"
    path.write_text(
        '{"text": "a cat sat"}\n{"text": "a cat sat"}\nnot json\n'
        '{"other": 1}\n{"text": "the mat"}\n'
    )
    out = str(tmp_path / "out")
    run_prepare([str(path)], out, "--dedup", "exact")
    assert inspect_main([out, "--documents", "0"]) == 0
    shown = capsys.readouterr().out
    assert "skipped (see rejects.jsonl): malformed_json 1, missing_text_field 1" in shown
    assert "removed (see removals.jsonl): exact_duplicate 1" in shown


@pytest.mark.integration
def test_plot_writes_the_length_histogram(stories_dataset, tmp_path, capsys):
    plot = str(tmp_path / "lengths.png")
    assert inspect_main([stories_dataset, "--plot", plot, "--documents", "0"]) == 0
    with open(plot, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    assert f"wrote {plot}" in capsys.readouterr().out


@pytest.mark.integration
def test_plot_without_matplotlib_is_one_line(stories_dataset, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # an import of it fails
    assert run_command("inspect", stories_dataset, "--plot", str(tmp_path / "x.png")) == 1
    assert (
        capsys.readouterr().err
        == "inspect: error: --plot needs matplotlib: pip install 'tokshards[plot]'\n"
    )


@pytest.mark.integration
def test_control_characters_are_escaped_when_documents_are_printed(tmp_path):
    doc = "red \x1b[31mALERT\x1b[0m\rhidden \u202eevil\nnext\tline"
    assert printable(doc) == "red \\x1b[31mALERT\\x1b[0m\\rhidden \\u202eevil\nnext\tline"
    out = str(tmp_path / "out")
    run_prepare([write_jsonl(str(tmp_path / "d.jsonl"), [doc])], out)
    shown = _cli("inspect", out)
    assert shown.returncode == 0, shown.stderr
    assert "\x1b" not in shown.stdout and "\r" not in shown.stdout
    assert "red \\x1b[31mALERT" in shown.stdout


@pytest.mark.integration
@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["prepare", "--validation-fraction", "1.5"],
            "prepare: error: --validation-fraction must be in [0, 1), got 1.5",
        ),
        (
            ["prepare", "--record-tokens", "3"],
            "prepare: error: --record-tokens must be at least 16, got 3",
        ),
        (
            ["prepare", "--near-bands", "0"],
            "prepare: error: --near-bands must be at least 1, got 0",
        ),
        (
            ["prepare", "--near-bands", "64", "--near-rows", "32"],
            "prepare: error: --near-bands times --near-rows must be at most 1024 hashes, got "
            "--near-bands 64, --near-rows 32",
        ),
        (["corpus", "--stories", "-3"], "corpus: error: --stories must be at least 0, got -3"),
        (
            ["batches", "--seq-len", "0", "--batch-size", "2", "--take", "1", "--out", "x.npz"],
            "batches: error: --seq-len must be at least 1, got 0",
        ),
    ],
)
def test_setting_errors_name_the_flag_typed(argv, message, tmp_path):
    command, *rest = argv
    rest += (
        ["--input", str(tmp_path / "in.txt"), "--output", str(tmp_path / "o")]
        if command == "prepare"
        else []
    )
    if command == "batches":
        rest = [str(tmp_path), *rest]
    if command == "corpus":
        rest += ["--output", str(tmp_path / "c.txt")]
    result = _cli(command, *rest)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [message]


@pytest.mark.integration
def test_an_unknown_split_is_a_setting_error_naming_the_flag(stories_dataset, capsys):
    assert run_command("inspect", stories_dataset, "--split", "test") == 2
    assert capsys.readouterr().err.splitlines() == [
        f"inspect: error: --split must name a split of {stories_dataset}: ['train', 'validation'], "
        "got 'test'"
    ]


@pytest.mark.integration
def test_statistics_without_the_load_extra_are_one_line(stories_dataset, capsys, monkeypatch):
    monkeypatch.delitem(sys.modules, "pipeline.load.lengths", raising=False)
    monkeypatch.setitem(sys.modules, "etils", None)  # not installed
    assert run_command("inspect", stories_dataset) == 1
    assert capsys.readouterr().err == (
        "inspect: error: document statistics read the loader's lengths index, which needs the load "
        "extra (etils is missing): pip install 'tokshards[load]'\n"
    )
