"""Every backend's ids equal its reference library's own encoding plus the boundary ids, special-token
text stays text, and specs that do not fix the ids are refused. Tokenizer files are built here,
offline (tests/tokenizer_files.py)."""

from __future__ import annotations

import hashlib
import json
import os

import numpy as np
import pytest
import tiktoken
import tiktoken.load
import tokenizers

from conftest import read_split, run_prepare
from pipeline import tokenization
from pipeline.tokenization import hf_backend
from pipeline.tokenization.tiktoken_backend import GPT2_RANKS_SHA256, _bundled_ranks_path, load_encoding
from tokenizer_files import SPECIALS, VARIED, shifted, train_bpe, write_tiktoken_spec


@pytest.fixture(scope="module")
def bpe(tmp_path_factory) -> str:
    return train_bpe(str(tmp_path_factory.mktemp("bpe")))


def _without_surrogates(text: str) -> str:
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def _hf_reference(path: str):
    """The library as its users call it: added tokens not split out, no template."""
    reference = tokenizers.Tokenizer.from_file(path)
    reference.encode_special_tokens = True
    return lambda text: reference.encode(_without_surrogates(text), add_special_tokens=False).ids


def _tiktoken_reference(spec_path: str):
    spec = json.loads(open(spec_path).read())
    encoding = tiktoken.Encoding(
        name="reference", pat_str=spec["pat_str"],
        mergeable_ranks=tiktoken.load.load_tiktoken_bpe(os.path.join(os.path.dirname(spec_path), spec["ranks"])),
        special_tokens=spec["special_tokens"],
    )
    return encoding.encode_ordinary


def _documents(flat: np.ndarray, lengths: np.ndarray) -> list[list[int]]:
    return [d.tolist() for d in np.split(flat, np.cumsum(lengths)[:-1])]


def _expected(reference, texts, bos: int | None, eos: int) -> list[list[int]]:
    return [([bos] if bos is not None else []) + reference(t) + [eos] for t in texts]


def test_bundled_table_matches_pinned_hash():
    with open(_bundled_ranks_path(), "rb") as f:
        assert hashlib.sha256(f.read()).hexdigest() == GPT2_RANKS_SHA256


def test_gpt2_is_tiktokens_gpt2_layout(encoding):
    gpt2 = tokenization.load_tokenizer("gpt2")
    assert gpt2.info.n_vocab == 50257 and gpt2.info.eot_id == 50256 and gpt2.info.bos_id is None
    assert tokenization.tokenizer_info("r50k_base").vocab_sha256 == gpt2.info.vocab_sha256
    flat, lengths = gpt2.encode_documents(VARIED)
    assert _documents(flat, lengths) == _expected(encoding.encode_ordinary, VARIED, None, 50256)


def test_hf_tokenizer_equals_the_library_with_end_of_text_after_each_document(bpe):
    hf = tokenization.load_tokenizer(bpe)
    assert hf.info.library == "tokenizers" and hf.info.library_version == tokenizers.__version__
    eos = SPECIALS.index("<|endoftext|>")
    assert (hf.info.eot_id, hf.info.bos_id) == (eos, None), "no rule in the file: <|endoftext|> after each"
    flat, lengths = hf.encode_documents(VARIED)
    documents = _documents(flat, lengths)
    assert documents == _expected(_hf_reference(bpe), VARIED, None, eos)
    special_ids = {SPECIALS.index(s) for s in SPECIALS}
    assert not special_ids & {i for d in documents for i in d[:-1]}, "special-token text stays text"
    assert hf.decode(documents[5][:-1]) == VARIED[5]


def test_hf_batches_of_documents_join_in_order(bpe, monkeypatch):
    monkeypatch.setattr(hf_backend, "ENCODE_BATCH", 3)
    hf = tokenization.load_tokenizer(bpe)
    flat, lengths = hf.encode_documents(VARIED)
    assert _documents(flat, lengths) == _expected(_hf_reference(bpe), VARIED, None, hf.info.eot_id)


def test_tiktoken_spec_file_equals_encode_ordinary(bpe, tmp_path):
    for suffix in (".json", ".toml"):
        spec = write_tiktoken_spec(bpe, str(tmp_path / suffix[1:]), suffix)
        loaded = tokenization.load_tokenizer(spec)
        assert loaded.info.library == "tiktoken" and loaded.info.eot_id == SPECIALS.index("<|endoftext|>")
        flat, lengths = loaded.encode_documents(VARIED)
        documents = _documents(flat, lengths)
        assert documents == _expected(_tiktoken_reference(write_tiktoken_spec(bpe, str(tmp_path / "ref"))), VARIED,
                                      None, loaded.info.eot_id)
        assert not set(range(len(SPECIALS))) & {i for d in documents for i in d[:-1]}


@pytest.mark.parametrize("backend", ["tokenizers", "tiktoken"])
def test_bos_and_eos_from_the_tokenizers_own_rule(bpe, tmp_path, backend):
    bos, eos = SPECIALS.index("<s>"), SPECIALS.index("</s>")
    if backend == "tokenizers":
        directory = tmp_path / "llama-like"
        directory.mkdir()
        definition = json.loads(open(bpe).read())
        definition["post_processor"] = {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"Sequence": {"id": "A", "type_id": 0}}], "special_tokens": {"<s>": {"id": "<s>", "ids": [bos], "tokens": ["<s>"]}},
        }
        (directory / "tokenizer.json").write_text(json.dumps(definition))
        (directory / "tokenizer_config.json").write_text(json.dumps({"eos_token": {"content": "</s>"}}))
        spec, reference = str(directory), _hf_reference(str(directory / "tokenizer.json"))
    else:
        spec = write_tiktoken_spec(bpe, str(tmp_path / "tt"))
        data = json.loads(open(spec).read())
        open(spec, "w").write(json.dumps({**data, "bos_token": "<s>", "eos_token": "</s>"}))
        reference = _tiktoken_reference(spec)
    loaded = tokenization.load_tokenizer(spec)
    assert (loaded.info.bos_id, loaded.info.eot_id) == (bos, eos)
    flat, lengths = loaded.encode_documents(VARIED)
    assert _documents(flat, lengths) == _expected(reference, VARIED, bos, eos)
    first, _ = loaded.encode_piece(VARIED[0], first=True)
    later, _ = loaded.encode_piece(VARIED[0], first=False)
    assert first.tolist() == [bos, *later.tolist()] and later[-1] == eos
    flags = tokenization.load_tokenizer(spec, bos_token="none", eos_token="<|endoftext|>")
    assert (flags.info.bos_id, flags.info.eot_id) == (None, 0) and "flags" in flags.info.boundary


def test_a_tokenizer_json_without_any_end_token_is_refused_naming_the_flag(tmp_path):
    model = tokenizers.Tokenizer(tokenizers.models.WordLevel({"a": 0, "[UNK]": 1}, unk_token="[UNK]"))
    path = str(tmp_path / "tokenizer.json")
    model.save(path)
    with pytest.raises(tokenization.TokenizerError, match="--eos-token"):
        tokenization.load_tokenizer(path)
    with pytest.raises(tokenization.TokenizerError, match="no token '<x>'"):
        tokenization.load_tokenizer(path, eos_token="<x>")


def test_specs_that_do_not_fix_the_ids_are_refused(bpe, tmp_path):
    spec = write_tiktoken_spec(bpe, str(tmp_path))
    with pytest.raises(tokenization.TokenizerError, match="bare tiktoken rank file.*pat_str"):
        tokenization.load_tokenizer(os.path.join(os.path.dirname(spec), "trained.tiktoken"))
    with pytest.raises(tokenization.TokenizerError, match="unknown tokenizer"):
        tokenization.load_tokenizer("no_such_encoding")
    with pytest.raises(tokenization.TokenizerError, match="does not exist"):
        tokenization.load_tokenizer(str(tmp_path / "missing.json"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(tokenization.TokenizerError, match="holds no tokenizer.json"):
        tokenization.load_tokenizer(str(tmp_path / "empty"))


def test_identity_hash_follows_the_ids_not_the_layout(bpe, tmp_path):
    definition = json.loads(open(bpe).read())
    reformatted = tmp_path / "a" / "tokenizer.json"
    reformatted.parent.mkdir()
    reformatted.write_text(json.dumps(definition, indent=4))
    assert tokenization.tokenizer_info(str(reformatted)).vocab_sha256 == tokenization.tokenizer_info(bpe).vocab_sha256
    other = shifted(bpe, str(tmp_path / "b"), 1000)
    assert tokenization.tokenizer_info(other).vocab_sha256 != tokenization.tokenizer_info(bpe).vocab_sha256


def test_saved_copies_load_to_the_same_identity(bpe, tmp_path):
    for spec in (bpe, write_tiktoken_spec(bpe, str(tmp_path / "tt")), "gpt2"):
        loaded = tokenization.load_tokenizer(spec)
        again = tokenization.load_tokenizer(loaded.save(str(tmp_path / "copy" / loaded.library)))
        same = ("vocab_sha256", "n_vocab", "eot_id", "bos_id", "library")
        assert [getattr(again.info, k) for k in same] == [getattr(loaded.info, k) for k in same]


def test_other_names_go_through_tiktoken(monkeypatch):
    # cl100k_base is not shipped: it loads through tiktoken's own registry and cache, as usual.
    # Loading it for real would download, so only the hand-off is checked here.
    asked = []
    monkeypatch.setattr(tiktoken, "get_encoding", lambda name: asked.append(name) or "loaded")
    assert load_encoding.__wrapped__("cl100k_base") == "loaded"
    assert asked == ["cl100k_base"]


def _records_as_documents(output: str, eos: int) -> list[tuple[int, ...]]:
    flat = np.concatenate(read_split(output))
    ends = np.flatnonzero(flat == eos) + 1
    return [tuple(d.tolist()) for d in np.split(flat, ends[:-1])]


@pytest.mark.parametrize("backend", ["tokenizers", "tiktoken"])
def test_prepare_writes_the_reference_ids_of_every_document(bpe, tmp_path, backend):
    corpus = tmp_path / "web.jsonl"
    texts = VARIED * 3 + [f"document {i}: " + "words " * (i % 50) for i in range(300)]
    corpus.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    if backend == "tokenizers":
        spec, reference = bpe, _hf_reference(bpe)
    else:
        spec = write_tiktoken_spec(bpe, str(tmp_path / "tt"))
        reference = _tiktoken_reference(spec)
    manifest = run_prepare([str(corpus)], str(tmp_path / "out"), "--tokenizer", spec, "--unit-bytes", "8192")
    assert manifest.tokenizer.library == backend and manifest.num_units > 1
    eos = manifest.tokenizer.eot_id
    written = _records_as_documents(str(tmp_path / "out"), eos)
    assert sorted(written) == sorted(tuple(reference(t) + [eos]) for t in texts if t.strip())
