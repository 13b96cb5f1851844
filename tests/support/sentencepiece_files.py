"""SentencePiece models trained here, offline, in a fraction of a second each, and text that
exercises them: what the tokenizer.json tests get from support/tokenizer_files.py."""

from __future__ import annotations

import functools
import io
import os
import random

from pipeline import corpus
from pipeline.tokenization.sentencepiece_model import CONTROL, NORMAL, UNKNOWN, model_proto_class

_SYLLABLES = "ka ti ro me nu sa le do pi ga fu ze wo ha ri ta mo ne ki so la be".split()
_R = random.Random(42)
LEXICON = ["".join(_R.choice(_SYLLABLES) for _ in range(_R.randint(1, 4))) for _ in range(1500)]
LEXICON += "the of and new york naïve café Straße 2024 12345 3.14 <s> </s> x y a b".split()
_EXTRA = [
    "日本語の文章",
    "中文字符",
    "한국어",
    "😀🎉",
    "ｆｕｌｌ",
    "e\u0301",
    "\u00a0",
    "\t",
    "  ",
    "Ⅻ",
]

# Each a way models are trained: BPE and Unigram, byte fallback on and off, the dummy prefix on and
# off, nmt_nfkc and identity normalization, the whitespace collapse on and off, user-defined pieces,
# and the layouts of Llama 2 (identity, whitespace kept, byte fallback, digits split) and Gemma
# (also no dummy prefix, user-defined whitespace runs).
BPE = {
    "bpe_default": {},  # nmt_nfkc, remove_extra_whitespaces, add_dummy_prefix
    "bpe_byte_fallback": {"byte_fallback": True},
    "bpe_identity_keep_ws": {
        "normalization_rule_name": "identity",
        "remove_extra_whitespaces": False,
    },
    "bpe_llama_like": {
        "byte_fallback": True,
        "normalization_rule_name": "identity",
        "remove_extra_whitespaces": False,
        "split_digits": True,
        "allow_whitespace_only_pieces": True,
        "split_by_unicode_script": True,
    },
    "bpe_no_dummy": {"add_dummy_prefix": False},
    "bpe_gemma_like": {
        "byte_fallback": True,
        "normalization_rule_name": "identity",
        "remove_extra_whitespaces": False,
        "add_dummy_prefix": False,
        "split_digits": True,
        "allow_whitespace_only_pieces": True,
        "user_defined_symbols": ["  ", "\t\t", "<start_of_turn>"],
    },
    "bpe_user_defined": {"user_defined_symbols": ["<s>x", "a b", "new▁york", "▁▁", "x▁y", "<tag>"]},
    "bpe_split_digits": {"split_digits": True, "byte_fallback": True},
    "bpe_ws_only_pieces": {
        "allow_whitespace_only_pieces": True,
        "split_by_whitespace": False,
        "remove_extra_whitespaces": False,
    },
    "bpe_suffix": {"treat_whitespace_as_suffix": True},
    "bpe_identity_collapse_ws": {"normalization_rule_name": "identity"},
    "bpe_suffix_identity_collapse_ws": {
        "treat_whitespace_as_suffix": True,
        "normalization_rule_name": "identity",
    },
    "bpe_suffix_keep_ws_no_dummy": {
        "treat_whitespace_as_suffix": True,
        "remove_extra_whitespaces": False,
        "add_dummy_prefix": False,
        "normalization_rule_name": "identity",
    },
}
UNIGRAM = {
    "unigram_default": {"model_type": "unigram"},  # T5's layout
    "unigram_byte_fallback": {
        "model_type": "unigram",
        "byte_fallback": True,
        "normalization_rule_name": "identity",
    },
    "unigram_no_dummy_user_defined": {
        "model_type": "unigram",
        "add_dummy_prefix": False,
        "user_defined_symbols": ["<tag>"],
    },
}


def training_sentences(n: int = 2000, seed: int = 0):
    r = random.Random(seed)
    for _ in range(n):
        words = [
            LEXICON[min(int(r.paretovariate(0.8)) - 1, len(LEXICON) - 1)]
            for _ in range(r.randint(3, 16))
        ]
        if r.random() < 0.3:
            words.append(r.choice(_EXTRA))
        yield " ".join(words)


@functools.cache
def train_model(name: str, vocab_size: int = 400, stories: int = 0, **extra) -> bytes:
    """The serialized model of a configuration of `BPE` or `UNIGRAM` (or `name` alone, with
    `extra`), trained on `training_sentences`, or on that many of `pipeline.corpus`'s stories; the
    same bytes for the same arguments."""
    import sentencepiece as spm

    args = dict(
        vocab_size=vocab_size,
        model_type="bpe",
        character_coverage=1.0,
        num_threads=1,
        minloglevel=2,
        hard_vocab_limit=False,
    )
    args.update({**BPE, **UNIGRAM}.get(name, {}))
    args.update({k: list(v) if isinstance(v, tuple) else v for k, v in extra.items()})
    text = corpus.stories(stories, seed=5) if stories else training_sentences()
    out = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=text, model_writer=out, **args)
    return out.getvalue()


def write_model(path: str, data: bytes) -> str:
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)
    return path


def edited(data: bytes, edit) -> bytes:
    """The model with `edit(proto)` applied."""
    proto = model_proto_class()()
    proto.ParseFromString(data)
    edit(proto)
    return proto.SerializeToString()


def shifted(data: bytes, offset: int) -> bytes:
    """The model with `offset` pieces no text holds (private-use characters) inserted after its
    control pieces: every piece text encodes to has an id above `offset`, at the cost of a larger
    table, as a 256k vocabulary (Gemma's) has."""

    def insert(proto):
        pieces = list(proto.pieces)
        at = 1 + max(i for i, p in enumerate(pieces) if p.type in (UNKNOWN, CONTROL))
        filler = [
            chr(0xF0000 + i) if i < 0xFFFE else chr(0x100000 + i - 0xFFFE) for i in range(offset)
        ]
        del proto.pieces[:]
        proto.pieces.extend(pieces[:at])
        for text in filler:
            piece = proto.pieces.add()
            piece.piece, piece.score, piece.type = text, -1e9, NORMAL
        proto.pieces.extend(pieces[at:])

    return edited(data, insert)


# Text that exercises a model: leading, repeated and trailing spaces, tabs, line and paragraph
# separators, NBSP, ideographic and zero-width spaces, a literal ▁, CJK, Hangul, emoji, fullwidth
# and combining characters, NFKC expansions, digits, control and user-defined symbols as text.
ATOMS = [
    " ",
    " ",
    " ",
    "  ",
    "   ",
    "\t",
    "\n",
    "\r\n",
    "\u2028",
    "\u00a0",
    "\u3000",
    "\u200b",
    "▁",
    "▁▁",
    "\x00",
    "\x7f",
    "日本語",
    "中文",
    "한국어",
    "😀",
    "🎉",
    "🦜",
    "ｆｕｌｌ",
    "ＡＢＣ",
    "e\u0301",
    "\u0301",
    "ﬁ",
    "Ⅻ",
    "½",
    "①",
    "<s>",
    "</s>",
    "<unk>",
    "<pad>",
    "<s>x",
    "<tag>",
    "a b",
    "x y",
    "x▁y",
    "new york",
    "12345",
    "3.14",
    "2024",
    ".",
    ",",
    "!",
    "?",
    "'",
    '"',
    "(",
    ")",
    "-",
    "_",
    "=",
    "/",
    "\\",
    "@",
    "#",
    "a",
    "b",
    "x",
    "y",
    "Z",
    "0",
    "9",
    "naïve",
    "café",
    "Straße",
    "Ωμέγα",
    "¨",
    "´",
    "…",
    "‥",
    "⑴",
    "㈱",
    "ﾊﾟ",
    "\ufeff",
    "\u2581a",
    "a\u2581",
]
# Documents as a corpus holds them, empty and one-character ones included.
TRICKY = [
    "",
    " ",
    "  ",
    "a",
    "x",
    "7",
    "😀",
    "中",
    "\t",
    "a ",
    " a",
    "▁",
    "<s>",
    "</s>",
    "<s> </s>",
    "<s>hello</s>",
    "a b",
    "x y",
    "new york",
    "a  b",
    "a   b  ",
    "   leading spaces",
    "trailing spaces   ",
    "Hello <s> world </s> again",
    "ab cd ef",
    "12 345 6789 2024",
    "\t a \t",
    "tab\tseparated\tvalues",
    "a\u2028 b",
    "line\u2028separator",
    "a\u00a0 b",
    "no\u00a0break",
    "a \u0301b",
    "😀 🎉 x",
    "日本語 中文 text",
    "日本語の文章を書きます。",
    "ｆｕｌｌ ｗｉｄｔｈ",
    "e\u0301 e\u0301",
    "x▁y x▁ y",
    "the  of   and",
    "line one\nline two\r\nline three",
]


def random_text(r: random.Random, atoms: int) -> str:
    out = []
    for _ in range(atoms):
        if r.random() < 0.45:
            out.append(r.choice(ATOMS))
        else:
            out.append(r.choice(LEXICON) + r.choice([" ", " ", "", "  ", ". ", ", "]))
    text = "".join(out)
    if r.random() < 0.25:
        text = r.choice([" ", "  ", "\t", "\u3000", "▁"]) + text
    if r.random() < 0.25:
        text += r.choice([" ", "  ", "\n", "▁"])
    return text


def tricky_corpus(n: int = 200, seed: int = 0) -> list[str]:
    r = random.Random(seed)
    return TRICKY + [random_text(r, r.randint(1, 40)) for _ in range(n)]


def long_document(chars: int, seed: int = 0) -> str:
    """`chars` characters of `pipeline.corpus`'s stories, with a tricky passage every few
    stories."""
    r = random.Random(seed)
    parts, n = [], 0
    for story in corpus.stories(10**9, seed=seed):
        part = story + (" " if r.random() < 0.8 else "\n\n")
        if r.random() < 0.2:
            part += random_text(r, 20) + " "
        parts.append(part)
        n += len(part)
        if n >= chars:
            break
    return "".join(parts)[:chars]
