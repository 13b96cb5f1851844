"""A byte-level BPE `tokenizer.json` that tiktoken's engine encodes identically is encoded by
tiktoken, with the `tokenizers` library's ids document for document; every other file stays on
the library and says why in one line. Files are written offline from real ranks
(tests/support/bpe_files.py); the bulk of the comparison, on five full vocabularies, is the
integration tier's (tests/tokenization/test_byte_level_bpe_fuzz.py)."""

from __future__ import annotations

import random

import numpy as np
import pytest
from tokenizers import AddedToken, Tokenizer, models, normalizers, pre_tokenizers

from pipeline.tokenization import byte_level_bpe, hf_backend, load_tokenizer
from pipeline.tokenization.byte_level_bpe import PATTERNS, TiktokenParts
from pipeline.tokenization.hf_backend import ENGINE_ENV, HFTokenizer
from support.bpe_files import edited, random_unicode, write_small
from support.corpora import sample_documents
from support.tokenizer_files import VARIED, train_bpe

LIBRARY_LINE = "; encoded by tokenizers"
TIKTOKEN_LINE = "encoded by tiktoken with the ranks, split pattern and ids of the file"


def _load(path: str) -> HFTokenizer:
    return HFTokenizer(path, bos_flag=None, eos_flag=None)


def _library(path: str, monkeypatch) -> HFTokenizer:
    with monkeypatch.context() as patch:
        patch.setenv(ENGINE_ENV, "tokenizers")
        return _load(path)


def _documents() -> list[str]:
    rng = random.Random(3)
    return VARIED + sample_documents(40) + [random_unicode(rng, 80) for _ in range(80)]


@pytest.mark.parametrize(
    ("pattern", "nfc"), [(None, False), (PATTERNS["qwen2"], True), (PATTERNS["tekken"], False)]
)
def test_a_byte_level_file_is_encoded_by_tiktoken_with_the_librarys_ids(
    tmp_path, monkeypatch, pattern, nfc
):
    path = write_small(str(tmp_path), pattern, nfc=nfc)
    fast, library = _load(path), _library(path, monkeypatch)
    assert (fast.engine, library.engine) == ("tiktoken", "tokenizers")
    assert (
        fast.engine_note == "encoded by tiktoken with the ranks, split pattern and ids of the file"
    )
    assert library.engine_note == f"{ENGINE_ENV}=tokenizers{LIBRARY_LINE}"
    docs = _documents()
    for got, expected in zip(fast.encode_documents(docs), library.encode_documents(docs)):
        np.testing.assert_array_equal(got, expected)
    for first in (True, False):
        for got, expected in zip(
            fast.encode_piece(docs[1], first=first), library.encode_piece(docs[1], first=first)
        ):
            np.testing.assert_array_equal(got, expected)
    assert fast.info == library.info  # the dataset's identity does not depend on the engine


def _wordpiece(directory: str) -> str:
    tokenizer = Tokenizer(
        models.WordPiece({"[UNK]": 0, "a": 1, "##b": 2, "<|endoftext|>": 3}, unk_token="[UNK]")
    )
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    return _saved(tokenizer, directory)


def _unigram(directory: str) -> str:
    tokenizer = Tokenizer(
        models.Unigram([("<unk>", 0.0), ("a", -1.0), ("b", -2.0), ("ab", -1.5)], 0, False)
    )
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
    return _saved(tokenizer, directory)


def _byte_fallback(directory: str) -> str:
    """Llama 2's `tokenizer.json` as `transformers` converts it: bytes as `<0xNN>` tokens."""
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2} | {f"<0x{b:02X}>": 3 + b for b in range(256)}
    vocab |= {"▁": 259, "a": 260, "▁a": 261}
    tokenizer = Tokenizer(
        models.BPE(vocab, [("▁", "a")], unk_token="<unk>", byte_fallback=True, fuse_unk=True)
    )
    tokenizer.normalizer = normalizers.Sequence(
        [normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")]
    )
    return _saved(tokenizer, directory, eos="</s>")


def _saved(tokenizer: Tokenizer, directory: str, eos: str = "<|endoftext|>") -> str:
    tokenizer.add_special_tokens([AddedToken(eos, special=True)])
    path = f"{directory}/tokenizer.json"
    tokenizer.save(path)
    return path


def _three_splits(definition: dict) -> None:
    """Three `Split` rules before `ByteLevel`, as DeepSeek's files chain them."""
    steps = definition["pre_tokenizer"]["pretokenizers"]
    definition["pre_tokenizer"]["pretokenizers"] = [steps[0], steps[0], steps[0], steps[1]]


def _merge_moved_first(definition: dict) -> None:
    merges = definition["model"]["merges"]
    merges.insert(0, merges.pop(500))


def _merge_dropped(definition: dict) -> None:
    del definition["model"]["merges"][500]


def _plain_added_token(definition: dict) -> None:
    definition["added_tokens"].append(
        {
            "id": 2001,
            "content": "<tool_call>",
            "single_word": False,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
            "special": False,
        }
    )


def _other_pattern(definition: dict) -> None:
    definition["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = r"\S+|\s+"


@pytest.mark.parametrize(
    ("build", "line"),
    [
        (_wordpiece, "model: WordPiece, not BPE"),
        (_unigram, "model: Unigram, not BPE"),
        (_byte_fallback, "BPE model: byte_fallback (True), which tiktoken does not apply"),
        (
            lambda directory: train_bpe(directory, vocab_size=300),
            "BPE model: ignore_merges is off, and tiktoken takes a pre-token that is a whole "
            "token as it is",
        ),
    ],
)
def test_other_models_stay_on_the_library_saying_why(tmp_path, build, line):
    tokenizer = _load(build(str(tmp_path)))
    assert (tokenizer.engine, tokenizer.engine_note) == ("tokenizers", line + LIBRARY_LINE)


@pytest.mark.parametrize(
    ("edit", "line"),
    [
        (_three_splits, "pre-tokenizer: a Sequence of 3 Split rules"),
        (_merge_moved_first, "merges: merge 1 ("),
        (
            _merge_dropped,
            "merges: 1 splits of a token into two tokens are not merges, and tiktoken would merge "
            "them",
        ),
        (
            _plain_added_token,
            "added tokens: 1 not marked special (e.g. '<tool_call>'), which are split out of text",
        ),
        (
            _other_pattern,
            "pre-tokenizer: a Split pattern not among those shown to split alike in tiktoken's "
            "regex dialect",
        ),
    ],
)
def test_byte_level_files_tiktoken_cannot_follow_stay_on_the_library_saying_why(
    tmp_path, edit, line
):
    path = edited(write_small(str(tmp_path / "small"), PATTERNS["llama3"]), tmp_path, edit)
    tokenizer = _load(path)
    assert tokenizer.engine == "tokenizers"
    assert tokenizer.engine_note.startswith(line)
    assert tokenizer.engine_note.endswith(LIBRARY_LINE)


def test_a_file_whose_probe_text_differs_stays_on_the_library(tmp_path, monkeypatch):
    """The guard: ranks and a pattern that pass every rule but split otherwise than the file's
    (Llama 3's digits in threes for Qwen2's digits alone) give other ids on the probe text."""
    path = write_small(str(tmp_path), PATTERNS["qwen2"])
    parts = byte_level_bpe.tiktoken_parts
    monkeypatch.setattr(
        hf_backend,
        "tiktoken_parts",
        lambda definition, **checks: TiktokenParts(parts(definition).ranks, PATTERNS["llama3"], ()),
    )
    tokenizer = _load(path)
    assert tokenizer.engine == "tokenizers"
    assert tokenizer.engine_note.startswith("the probe text's ids differ from the library's at")
    assert tokenizer.engine_note.endswith(LIBRARY_LINE)


def test_only_text_a_normal_form_leaves_as_it_is_skips_the_librarys_normalizer(
    tmp_path, monkeypatch
):
    """Text already in NFC by Python's quick check goes to tiktoken as it is; text with surrogates
    does not: a pair of them (from JSON escapes) is one combining mark (U+1D165, class 216) to the
    library, which NFC moves before the acute accent (class 230)."""
    path = write_small(str(tmp_path), PATTERNS["qwen2"], nfc=True)
    fast, library = _load(path), _library(path, monkeypatch)
    docs = ["q\u0301\ud834\udd65", "caf\u00e9 \ufb01 \u00c5", "cafe\u0301 A\u030a", "x\ud800y"]
    for got, expected in zip(fast.encode_documents(docs), library.encode_documents(docs)):
        np.testing.assert_array_equal(got, expected)


@pytest.mark.integration
def test_a_hub_models_byte_level_file_is_encoded_by_tiktoken_too(hub, tmp_path):
    write_small(str(tmp_path / "repo"), PATTERNS["llama3"])
    commit = hub.commit("org/byte-level", str(tmp_path / "repo"))
    tokenizer = load_tokenizer(f"hf:org/byte-level@{commit}")
    assert (tokenizer.engine, tokenizer.engine_note) == ("tiktoken", TIKTOKEN_LINE)
