"""A Hugging Face tokenizer.json with more than 65,536 ids, from `prepare` through `train` to
`train sample`, as commands: ids stored as uint32, the model sized from the data, sampling with the
run's own copy of the tokenizer."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from pipeline.corpus import write_corpus
from pipeline.tokenization import load_tokenizer
from support.runs import IN_PROCESS, REPO, read_split
from support.tokenizer_files import shifted, train_bpe

OFFSET = 70_000


def _run(*argv: str) -> subprocess.CompletedProcess:
    result = subprocess.run([sys.executable, "-m", *argv], cwd=REPO, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return result


@pytest.mark.slow
def test_prepare_train_sample_with_a_vocabulary_above_65536(tmp_path):
    tokenizer_dir = str(tmp_path / "tokenizer")
    path = shifted(train_bpe(str(tmp_path / "bpe")), tokenizer_dir, OFFSET)
    corpus = str(tmp_path / "stories.txt")
    write_corpus(corpus, 600, seed=3)
    data = str(tmp_path / "data")
    _run(
        "pipeline",
        "prepare",
        "--tokenizer",
        path,
        "--input",
        corpus,
        "--output",
        data,
        "--validation-fraction",
        "0.05",
        *IN_PROCESS,
    )
    manifest = json.loads(open(os.path.join(data, "manifest.json")).read())
    n_vocab = manifest["tokenizer"]["n_vocab"]
    assert n_vocab > 65_536 and manifest["dtype"] == "uint32"
    tokens = np.concatenate(read_split(data))
    assert tokens.max() > 65_536, "the ids above 65,536 are stored whole"

    workdir = str(tmp_path / "run")
    model_flags = [
        "--preset",
        "tiny",
        "--width",
        "32",
        "--layers",
        "1",
        "--heads",
        "2",
        "--seq-len",
        "32",
    ]
    refused = subprocess.run(
        [
            sys.executable,
            "-m",
            "train",
            "--data",
            data,
            "--workdir",
            str(tmp_path / "small"),
            *model_flags,
            "--vocab-size",
            "50257",
            "--steps",
            "2",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert refused.returncode == 2 and refused.stderr.strip().splitlines()[-1] == (
        f"train: error: --vocab-size must hold the data's vocabulary of {n_vocab} ids; leave it "
        "out to take the data's, got 50257"
    )
    _run(
        "train",
        "--data",
        data,
        "--workdir",
        workdir,
        *model_flags,
        "--steps",
        "4",
        "--batch-size",
        "4",
        "--eval-every",
        "2",
        "--eval-batches",
        "1",
        "--checkpoint-every",
        "2",
    )
    config = json.loads(open(os.path.join(workdir, "config.json")).read())
    assert config["model"]["vocab_size"] == n_vocab

    shutil.rmtree(tokenizer_dir)  # sampling needs the run alone
    shutil.rmtree(data)
    sampled = _run(
        "train",
        "sample",
        "--workdir",
        workdir,
        "--prompt",
        "Once upon a time",
        "--max-tokens",
        "12",
    )
    assert sampled.stdout.startswith("Once upon a time")
    copy = load_tokenizer(os.path.join(workdir, "tokenizer"))
    assert copy.info.vocab_sha256 == manifest["tokenizer"]["vocab_sha256"]
