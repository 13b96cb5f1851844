"""Long documents encoded in pieces give exactly the ids of the whole document, for tokenizers built
the ways common models build theirs, and the pieces bound the library's memory."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import tokenizers
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tokenizers import Regex, decoders, models, normalizers, pre_tokenizers, trainers

from pipeline.tokenization import long_text
from support.runs import REPO
from support.tokenizer_files import VARIED, _training_text

# Pieces of text with many places to cut and many that look like one: runs of spaces, newlines
# and tabs, punctuation before spaces, digits, contractions, combining marks, scripts without
# spaces.
_PARTS = [
    "word",
    "Word",
    "the",
    "a",
    "fox's",
    "don't",
    "12345",
    "3.14",
    "é",
    "e\u0301",
    "日本語",
    "한국어",
    "🙂",
    " ",
    " ",
    " ",
    "  ",
    "   ",
    "\n",
    "\n\n",
    "\t",
    "\r\n",
    " \n",
    "\u00a0",
    ".",
    ",",
    "!?",
    "--",
    "(",
    ")",
    "'",
    '"',
    "#",
    "<|endoftext|>",
]
# Llama 3's split pattern, as its tokenizer.json writes it (cl100k's, without possessive
# quantifiers).
LLAMA3_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
TEXTS = st.lists(st.sampled_from(_PARTS), min_size=20, max_size=300).map("".join)


def _train(tokenizer: tokenizers.Tokenizer, trainer, directory) -> tokenizers.Tokenizer:
    tokenizer.train_from_iterator(_training_text(str(directory)) + ["".join(_PARTS)] * 5, trainer)
    return tokenizer


def _byte_level_bpe(directory) -> tokenizers.Tokenizer:
    """GPT-2's layout: the byte-level pre-tokenizer with its own split pattern."""
    tokenizer = tokenizers.Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    return _train(
        tokenizer,
        trainers.BpeTrainer(vocab_size=500, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()),
        directory,
    )


def _split_pattern_bpe(directory) -> tokenizers.Tokenizer:
    """Llama 3's and Qwen's layout: a split pattern, then bytes."""
    tokenizer = tokenizers.Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    return _train(
        tokenizer,
        trainers.BpeTrainer(vocab_size=500, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()),
        directory,
    )


def _metaspace_bpe(directory) -> tokenizers.Tokenizer:
    """SentencePiece-style (Mistral's newer files): spaces as U+2581, a prefix on the first word."""
    tokenizer = tokenizers.Tokenizer(models.BPE(byte_fallback=True))
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme="first")
    return _train(tokenizer, trainers.BpeTrainer(vocab_size=500), directory)


def _wordpiece(directory) -> tokenizers.Tokenizer:
    """BERT's: lower-cased, accents stripped, split at whitespace and punctuation."""
    tokenizer = tokenizers.Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    return _train(
        tokenizer, trainers.WordPieceTrainer(vocab_size=500, special_tokens=["[UNK]"]), directory
    )


def _prepending_bpe(directory) -> tokenizers.Tokenizer:
    """Llama 2's converted layout: a prefix and spaces as U+2581 in the normalizer, no
    pre-tokenizer, so a piece would gain a prefix the whole document has once: it must not be
    cut."""
    tokenizer = tokenizers.Tokenizer(models.BPE(byte_fallback=True))
    tokenizer.normalizer = normalizers.Sequence(
        [normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")]
    )
    return _train(tokenizer, trainers.BpeTrainer(vocab_size=500), directory)


BUILDERS = {
    "byte-level": _byte_level_bpe,
    "split-pattern": _split_pattern_bpe,
    "metaspace": _metaspace_bpe,
    "wordpiece": _wordpiece,
    "prepending": _prepending_bpe,
}
CUTTABLE = {"byte-level", "split-pattern", "metaspace", "wordpiece"}


@pytest.fixture(scope="module", params=sorted(BUILDERS))
def built(request, tmp_path_factory):
    tokenizer = BUILDERS[request.param](tmp_path_factory.mktemp(request.param))
    tokenizer.encode_special_tokens = True
    return request.param, lambda text: np.array(
        tokenizer.encode(text, add_special_tokens=False).ids, dtype=np.uint32
    )


@pytest.mark.integration
def test_pieces_give_the_ids_of_the_whole_text(built, monkeypatch):
    # Each cut's own check sees 3 characters either side: the rule must hold beyond what it checks.
    monkeypatch.setattr(long_text, "JUNCTION", 3)
    name, encode = built
    cuts = []

    @settings(
        max_examples=150,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture],
    )
    @given(TEXTS)
    def check(text):
        parts = long_text.pieces(text, encode, piece_chars=24)
        assert "".join(parts) == text
        assert np.concatenate([encode(p) for p in parts]).tolist() == encode(text).tolist()
        cuts.append(len(parts) - 1)

    check()
    if name in CUTTABLE:
        assert sum(cuts) > 50, "texts over the piece size are cut"
    else:
        assert sum(cuts) == 0, "a tokenizer that joins across the cut is encoded whole"


def test_the_backend_encodes_long_documents_in_pieces_with_the_same_ids(tmp_path, monkeypatch):
    from pipeline.tokenization import hf_backend, load_tokenizer
    from support.tokenizer_files import train_bpe

    path = train_bpe(str(tmp_path))
    whole = load_tokenizer(path).encode_documents(VARIED * 50)
    monkeypatch.setattr(hf_backend, "PIECE_CHARS", 200)
    monkeypatch.setattr(long_text, "PIECE_CHARS", 200)
    long_document = (
        " ".join(VARIED * 50).encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    )
    tokenizer = hf_backend.HFTokenizer(path, bos_flag=None, eos_flag=None)
    assert len(long_text.pieces(long_document, tokenizer._encode_one, 200)) > 10
    flat, lengths = tokenizer.encode_documents(VARIED * 50)
    assert np.array_equal(flat, whole[0]) and np.array_equal(lengths, whole[1])
    reference = tokenizers.Tokenizer.from_file(path)
    reference.encode_special_tokens = True
    expected = reference.encode(long_document, add_special_tokens=False).ids
    assert tokenizer.encode_piece(long_document, first=True)[0].tolist() == [
        *expected,
        tokenizer.info.eot_id,
    ]


@pytest.mark.slow
def test_a_20_mb_document_stays_within_a_few_hundred_mib(tmp_path):
    # Whole, the library peaks at about 2.5 GiB for this document (docs/data-format.md).
    from pipeline.corpus import write_corpus
    from support.tokenizer_files import train_bpe

    write_corpus(str(tmp_path / "stories.txt"), 3000, seed=3)
    text = (tmp_path / "stories.txt").read_text().replace("<|endoftext|>", "")
    (tmp_path / "long.txt").write_text((text * (20_000_000 // len(text) + 1))[:20_000_000])
    script = """
import sys
from pipeline.tokenization import load_tokenizer

def peak():  # this process's own high-water mark (ru_maxrss starts from the parent's at fork)
    return next(
        int(line.split()[1]) * 1024
        for line in open("/proc/self/status")
        if line.startswith("VmHWM")
    )

tokenizer = load_tokenizer(sys.argv[1])
text = open(sys.argv[2]).read()
before = peak()
flat, _ = tokenizer.encode_documents([text])
print(len(flat), before, peak())
"""
    repo = REPO
    command = [
        sys.executable,
        "-c",
        script,
        train_bpe(str(tmp_path / "tok")),
        str(tmp_path / "long.txt"),
    ]
    ids, before, peak = map(
        int,
        subprocess.run(
            command, cwd=repo, capture_output=True, text=True, check=True
        ).stdout.split(),
    )
    print(
        f"20 MB document: {ids} ids; peak RSS {peak / 2**20:.0f} MiB, {before / 2**20:.0f} MiB "
        "before encoding"
    )
    assert ids > 4_000_000 and peak - before < 300 * 2**20
