"""A hub model's tokenizer (`hf:ORG/NAME`), resolved to a commit and read from the loopback
stand-in: the manifest records the pinned commit, and a push to `main` afterwards changes nothing a
rerun reads."""

from __future__ import annotations

import json
import shutil

import pytest

from pipeline.tokenization import TokenizerError, load_tokenizer
from pipeline.tokenization.hub import pin
from support.runs import run_prepare
from support.tokenizer_files import shifted, train_bpe


@pytest.mark.integration
def test_a_hub_tokenizer_is_pinned_and_read_at_its_commit(hub, tmp_path):
    repo = tmp_path / "repo"
    path = train_bpe(str(repo))
    (repo / "tokenizer_config.json").write_text(
        json.dumps({"bos_token": "<s>", "add_bos_token": True, "eos_token": "</s>"})
    )
    (repo / "bpe-corpus.txt").unlink()
    first = hub.commit("org/model", str(repo))
    corpus = tmp_path / "docs.jsonl"
    corpus.write_text(
        "".join(json.dumps({"text": f"story {i} of a fox"}) + "\n" for i in range(50))
    )
    manifest = run_prepare([str(corpus)], str(tmp_path / "out"), "--tokenizer", "hf:org/model")
    assert manifest.config.tokenizer == f"hf:org/model@{first}"
    local = load_tokenizer(path)
    assert (
        manifest.tokenizer.vocab_sha256 == local.info.vocab_sha256
        and manifest.tokenizer.name == "org/model"
    )
    assert (manifest.tokenizer.bos_id, manifest.tokenizer.eot_id) == (1, 2), (
        "the rule of the config beside it"
    )

    shutil.rmtree(repo)
    other = tmp_path / "other"
    shifted(train_bpe(str(tmp_path / "v2")), str(other), 1000)
    hub.commit("org/model", str(other))
    assert pin("hf:org/model") != f"hf:org/model@{first}"
    again = load_tokenizer(f"hf:org/model@{first}")
    assert again.info.vocab_sha256 == local.info.vocab_sha256, "a pinned spec reads its own commit"


@pytest.mark.integration  # a loopback server
def test_hub_tokenizer_errors_are_one_line(hub):
    with pytest.raises(TokenizerError, match="cannot be resolved"):
        pin("hf:org/missing")
    with pytest.raises(TokenizerError, match="not pinned to a commit"):
        load_tokenizer("hf:org/model@main")
    with pytest.raises(TokenizerError, match="is not hf:ORG/NAME"):
        pin("hf:no-slash")
