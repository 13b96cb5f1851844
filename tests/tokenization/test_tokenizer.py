"""Every backend's ids equal its reference library's own encoding plus the boundary ids,
special-token text stays text, and specs that do not fix the ids are refused. Tokenizer files are
built here, offline (tests/support/tokenizer_files.py)."""

from __future__ import annotations

import hashlib
import json
import os

import numpy as np
import pytest
import tiktoken
import tiktoken.load
import tokenizers

from pipeline import tokenization
from pipeline.tokenization import hf_backend
from pipeline.tokenization.tiktoken_backend import (
    GPT2_RANKS_SHA256,
    _bundled_ranks_path,
    load_encoding,
)
from support.corpora import write_jsonl
from support.runs import read_split, run_prepare
from support.tokenizer_files import (
    SPECIALS,
    VARIED,
    shifted,
    train_bpe,
    write_tiktoken_spec,
)


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
        name="reference",
        pat_str=spec["pat_str"],
        mergeable_ranks=tiktoken.load.load_tiktoken_bpe(
            os.path.join(os.path.dirname(spec_path), spec["ranks"])
        ),
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


# GPT-2's ids as published apart from this project and from tiktoken's table: the docstring of
# Hugging Face transformers' GPT2Tokenizer (src/transformers/models/gpt2/tokenization_gpt2.py) shows
# tokenizer("Hello world")["input_ids"] == [15496, 995] and tokenizer(" Hello world")["input_ids"]
# == [18435, 995]; GPT-2's end of text, <|endoftext|>, is 50256 (eos_token_id in its config.json).
PUBLISHED_GPT2 = {"Hello world": [15496, 995], " Hello world": [18435, 995]}
PUBLISHED_GPT2_EOT = 50256


@pytest.mark.integration
def test_gpt2_gives_the_published_ids_and_prepare_writes_them(tmp_path):
    gpt2 = tokenization.load_tokenizer("gpt2")
    texts = list(PUBLISHED_GPT2)
    flat, lengths = gpt2.encode_documents(texts)
    assert _documents(flat, lengths) == [PUBLISHED_GPT2[t] + [PUBLISHED_GPT2_EOT] for t in texts]
    # Through prepare, into the shards (documents in the order the seed shuffles them to).
    out = str(tmp_path / "out")
    run_prepare([write_jsonl(str(tmp_path / "hello.jsonl"), texts)], out)
    tokens = np.concatenate(read_split(out)).tolist()
    assert tokens in (
        [*PUBLISHED_GPT2[a], PUBLISHED_GPT2_EOT, *PUBLISHED_GPT2[b], PUBLISHED_GPT2_EOT]
        for a, b in (texts, texts[::-1])
    )


def test_hf_tokenizer_equals_the_library_with_end_of_text_after_each_document(bpe):
    hf = tokenization.load_tokenizer(bpe)
    assert hf.info.library == "tokenizers" and hf.info.library_version == tokenizers.__version__
    eos = SPECIALS.index("<|endoftext|>")
    assert (hf.info.eot_id, hf.info.bos_id) == (eos, None), (
        "no rule in the file: <|endoftext|> after each"
    )
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
        assert loaded.info.library == "tiktoken" and loaded.info.eot_id == SPECIALS.index(
            "<|endoftext|>"
        )
        flat, lengths = loaded.encode_documents(VARIED)
        documents = _documents(flat, lengths)
        assert documents == _expected(
            _tiktoken_reference(write_tiktoken_spec(bpe, str(tmp_path / "ref"))),
            VARIED,
            None,
            loaded.info.eot_id,
        )
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
            "single": [
                {"SpecialToken": {"id": "<s>", "type_id": 0}},
                {"Sequence": {"id": "A", "type_id": 0}},
            ],
            "pair": [{"Sequence": {"id": "A", "type_id": 0}}],
            "special_tokens": {"<s>": {"id": "<s>", "ids": [bos], "tokens": ["<s>"]}},
        }
        (directory / "tokenizer.json").write_text(json.dumps(definition))
        (directory / "tokenizer_config.json").write_text(
            json.dumps({"eos_token": {"content": "</s>"}})
        )
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
    model = tokenizers.Tokenizer(
        tokenizers.models.WordLevel({"a": 0, "[UNK]": 1}, unk_token="[UNK]")
    )
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
    assert (
        tokenization.tokenizer_info(str(reformatted)).vocab_sha256
        == tokenization.tokenizer_info(bpe).vocab_sha256
    )
    other = shifted(bpe, str(tmp_path / "b"), 1000)
    assert (
        tokenization.tokenizer_info(other).vocab_sha256
        != tokenization.tokenizer_info(bpe).vocab_sha256
    )


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


@pytest.mark.integration
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
    manifest = run_prepare(
        [str(corpus)], str(tmp_path / "out"), "--tokenizer", spec, "--unit-bytes", "8192"
    )
    assert manifest.tokenizer.library == backend and manifest.num_units > 1
    eos = manifest.tokenizer.eot_id
    written = _records_as_documents(str(tmp_path / "out"), eos)
    assert sorted(written) == sorted(tuple(reference(t) + [eos]) for t in texts if t.strip())


def _with_added_token(source: str, directory, content: str, *, special: bool) -> str:
    """`source` with the added token `content` marked special or not."""
    definition = json.loads(open(source).read())
    for token in definition["added_tokens"]:
        if token["content"] == content:
            token["special"] = special
    directory.mkdir()
    (directory / "tokenizer.json").write_text(json.dumps(definition))
    return str(directory / "tokenizer.json")


@pytest.mark.parametrize(
    "spec_of", [lambda bpe, tmp: bpe, lambda bpe, tmp: "gpt2"], ids=["tokenizers", "tiktoken"]
)
def test_boundary_tokens_must_be_special_tokens(bpe, tmp_path, spec_of):
    spec = spec_of(bpe, tmp_path)
    for flags in ({"eos_token": "e"}, {"bos_token": "e"}):
        with pytest.raises(
            tokenization.TokenizerError, match="'e' .* is not a special token.*<\\|endoftext\\|>"
        ):
            tokenization.load_tokenizer(spec, **flags)


def test_an_end_of_text_token_not_marked_special_is_refused_before_any_work(bpe, tmp_path):
    # Its text inside a document would encode to the EOS id: 26 documents read as 33 and more.
    from pipeline.prepare.launcher import PrepareError

    spec = _with_added_token(bpe, tmp_path / "plain", "<|endoftext|>", special=False)
    corpus = tmp_path / "web.jsonl"
    corpus.write_text(
        "".join(
            json.dumps({"text": f"page {i} quotes <|endoftext|> in its text"}) + "\n"
            for i in range(26)
        )
    )
    with pytest.raises(PrepareError, match="'<\\|endoftext\\|>' .* is not a special token"):
        run_prepare([str(corpus)], str(tmp_path / "out"), "--tokenizer", spec)
    assert not os.path.exists(tmp_path / "out" / "manifest.json")


def test_a_bos_equal_to_the_eos_is_refused_by_prepare_and_by_readers(tmp_path):
    from pipeline.prepare.launcher import PrepareError
    from schemas.manifest import TokenizerInfo

    with pytest.raises(
        PrepareError, match="BOS '<\\|endoftext\\|>' is also the EOS.*--bos-token none"
    ):
        run_prepare(
            [str(write_stories(tmp_path))], str(tmp_path / "out"), "--bos-token", "<|endoftext|>"
        )
    with pytest.raises(ValueError, match="BOS id is its end-of-text id"):
        TokenizerInfo(
            name="t", vocab_sha256="0" * 64, n_vocab=10, eot_id=3, tiktoken_version="", bos_id=3
        )


def write_stories(tmp_path):
    from pipeline.corpus import write_corpus

    path = tmp_path / "stories.txt"
    write_corpus(str(path), 26, seed=1)
    return path


@pytest.mark.integration
def test_document_text_that_encodes_to_a_boundary_id_fails_the_run(tmp_path):
    # A BPE whose merges spell the special token's text from plain characters: the token shares the
    # vocabulary's id, so text can reach it however special-token text is split.
    from pipeline.prepare.launcher import PrepareError

    vocab = {"<": 0, "/": 1, "s": 2, ">": 3, "</": 4, "s>": 5, "</s>": 6, "a": 7}
    model = tokenizers.Tokenizer(
        tokenizers.models.BPE(vocab, [("<", "/"), ("s", ">"), ("</", "s>")])
    )
    model.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
    model.add_special_tokens(["</s>"])
    path = str(tmp_path / "tokenizer.json")
    model.save(path)
    loaded = tokenization.load_tokenizer(path)
    assert loaded.info.eot_id == 6
    assert loaded.encode_documents(["a a"])[0].tolist() == [7, 7, 6]
    with pytest.raises(tokenization.TokenizerError, match="encoded to the EOS id 6"):
        loaded.encode_documents(["a </s> a"])
    corpus = tmp_path / "c.jsonl"
    corpus.write_text(json.dumps({"text": "a </s> a"}) + "\n")
    with pytest.raises(PrepareError, match="encoded to the EOS id 6"):
        run_prepare([str(corpus)], str(tmp_path / "out"), "--tokenizer", path)


def test_a_tiktoken_special_id_that_is_also_an_ordinary_rank_is_refused(bpe, tmp_path):
    spec = write_tiktoken_spec(bpe, str(tmp_path / "tt"))
    data = json.loads(open(spec).read())
    data["special_tokens"]["<|endoftext|>"] = 300  # a merged token's rank
    open(spec, "w").write(json.dumps(data))
    with pytest.raises(
        tokenization.TokenizerError, match="id 300, which is also an ordinary token's rank"
    ):
        tokenization.load_tokenizer(spec)


@pytest.mark.integration
@pytest.mark.parametrize("backend", ["tokenizers", "tiktoken"])
def test_the_lengths_index_finds_every_document_at_its_bos_in_small_records(bpe, tmp_path, backend):
    # Documents hold the boundary tokens' text and span several 16-token records: the index still
    # finds exactly the documents written, each starting with the BOS and ending with the EOS.
    from pipeline.dataset.manifest_io import read_manifest
    from pipeline.load.lengths import SplitLengths

    spec = bpe if backend == "tokenizers" else write_tiktoken_spec(bpe, str(tmp_path / "tt"))
    texts = [
        f"story {i} says <s> and </s> and <|endoftext|> " + "word " * (i % 30) for i in range(26)
    ]
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    out = str(tmp_path / "out")
    manifest = run_prepare(
        [str(corpus)],
        out,
        "--tokenizer",
        spec,
        "--bos-token",
        "<s>",
        "--eos-token",
        "</s>",
        "--record-tokens",
        "16",
    )
    assert manifest.totals["train"].documents == 26 and manifest.totals["train"].records > 26
    lengths = SplitLengths.of(out, read_manifest(out), "train")
    documents = np.split(
        np.concatenate(read_split(out)), np.cumsum(np.concatenate(lengths.docs))[:-1]
    )
    assert len(documents) == 26
    bos, eos = SPECIALS.index("<s>"), SPECIALS.index("</s>")
    assert all(
        d[0] == bos and d[-1] == eos and bos not in d[1:] and eos not in d[:-1] for d in documents
    )
